module example.invalid/wasmprov/plugins/sdk-go

go 1.25
