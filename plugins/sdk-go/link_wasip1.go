//go:build wasip1

package plugin

// The component's exports, which call the registered plugin.
import _ "example.invalid/wasmprov/plugins/sdk-go/bindings/exports"
