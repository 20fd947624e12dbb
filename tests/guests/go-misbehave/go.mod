// A test guest in Go (plugins/build.sh builds it like a Go plugin into
// target/test-guests/go-misbehave.wasm): checks that a fresh instance per
// call, the memory cap and the time budget hold with the Go runtime
// (host/tests/go_runtime.rs).
module wit_component

go 1.25

require go.bytecodealliance.org/pkg v0.2.2
