// Package hooks is what the generated exports (package
// bindings/exports) call for the component's `plugin` interface. The
// functions are set by plugin.Register; a program that never registers a
// plugin fails every call saying so.
package hooks

import (
	"example.invalid/wasmprov/plugins/sdk-go/bindings/types"
	witTypes "example.invalid/wasmprov/plugins/sdk-go/bindings/wit/types"
)

const unregistered = "no plugin is registered: call plugin.Register in an init function of package main"

var (
	Capabilities = func() types.PluginCapabilities {
		panic(unregistered)
	}
	Provision = func(types.ProvisionRequest) witTypes.Result[types.Volume, types.ProvisionError] {
		return witTypes.Err[types.Volume](types.MakeProvisionErrorFailed(unregistered))
	}
	Delete = func(types.DeleteRequest) witTypes.Result[witTypes.Unit, types.DeleteError] {
		return witTypes.Err[witTypes.Unit](types.MakeDeleteErrorFailed(unregistered))
	}
)
