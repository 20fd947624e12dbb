module {{name}}

go 1.25

require {{go_sdk_module}} v{{sdk_version}}
{{go_sdk_replace}}
