// The hostpath-go plugin. `wit-bindgen go` names the module wit_component and
// generates its packages wasmprov_provisioner_* (bindings) and the main
// package next to this file at build time (plugins/build.sh, in
// target/wasm-build/go/hostpath-go/). go.bytecodealliance.org/pkg is not on
// the Go module proxy: build.sh replaces it with the copy shipped inside the
// crate wit-bindgen-go 0.60.0 (the version wit-bindgen-cli 0.60.0 generates
// for; its go.mod asks for Go 1.25).
module wit_component

go 1.25

require go.bytecodealliance.org/pkg v0.2.2
