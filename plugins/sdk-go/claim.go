package plugin

import "example.invalid/wasmprov/plugins/sdk-go/bindings/types"

// HostnameLabel is the node label node affinity is usually expressed with.
const HostnameLabel = "kubernetes.io/hostname"

// CheckFilesystemClaim checks a claim for a plugin that makes empty
// filesystem volumes: a size above 0, access modes, volumeMode Filesystem,
// no data source, no selector, and a PV name that is one safe directory
// name. It returns the requested size; every refusal is InvalidArgument.
func CheckFilesystemClaim(plugin string, request ProvisionRequest) (uint64, error) {
	claim := request.Claim
	switch {
	case claim.RequestedBytes == 0:
		return 0, InvalidArgument("the claim requests 0 bytes: set spec.resources.requests.storage to a positive size")
	case len(claim.AccessModes) == 0:
		return 0, InvalidArgument("the claim has no access modes: set spec.accessModes, e.g. [ReadWriteOnce]")
	case claim.VolumeMode == types.VolumeModeBlock:
		return 0, InvalidArgument("the claim asks for a block volume (volumeMode: Block); the %s plugin only provides filesystem volumes", plugin)
	case claim.DataSource.IsSome():
		source := claim.DataSource.Some()
		return 0, InvalidArgument("the claim wants its data copied from %s %q; the %s plugin cannot pre-populate volumes (no snapshots or cloning)",
			source.Kind, source.Name, plugin)
	case claim.Selector.IsSome():
		return 0, InvalidArgument("the claim has a spec.selector; the %s plugin cannot select among existing volumes: remove the selector", plugin)
	}
	if err := CheckPvName(request.PvName); err != nil {
		return 0, InvalidArgument("%s", err)
	}
	return claim.RequestedBytes, nil
}

// SelectedNode is the selected node, for a class that needs one (neededBy
// names the parameter or feature in the message).
func SelectedNode(request ProvisionRequest, neededBy string) (Node, error) {
	if request.SelectedNode.IsSome() {
		return request.SelectedNode.Some(), nil
	}
	fix := "the class waits for the first consumer but no node was selected yet (with `wasmprov plugin invoke`, pass --node)"
	if request.StorageClass.VolumeBindingMode == types.VolumeBindingModeImmediate {
		fix = "the StorageClass has volumeBindingMode: Immediate; set it to WaitForFirstConsumer"
	}
	return Node{}, InvalidArgument("%s pins the volume to the selected node, but the request has none: %s", neededBy, fix)
}

// Annotation is the value of a claim annotation.
func Annotation(request ProvisionRequest, key string) (string, bool) {
	return Lookup(request.Claim.Annotations, key)
}
