// Package plugin is the SDK for writing wasmprov storage plugins in Go
// (GOOS=wasip1, made a component with `wasmprov plugin componentize`):
//
//	package main
//
//	import plugin "example.invalid/wasmprov/plugins/sdk-go"
//
//	type mine struct{}
//
//	func (mine) Provision(request plugin.ProvisionRequest) (plugin.Volume, error) {
//		params := plugin.NewParams("mine", request.StorageClass.Parameters)
//		if err := params.RejectUnknown("server"); err != nil {
//			return plugin.Volume{}, err
//		}
//		...
//		return plugin.NewVolume(size, plugin.NFSSource(server, path, false)), nil
//	}
//
//	func (mine) Delete(request plugin.DeleteRequest) error { return nil }
//
//	func init() { plugin.Register(mine{}) }
//
//	func main() {}
//
// Provision and Delete answer with an error made by InvalidArgument,
// Failed, InBackground, NoChange, Reschedule (provision) or Ignored
// (delete); any other error is answered as failed. The helpers (NewParams,
// CheckFilesystemClaim, Join, HostPathSource...) give the checks and messages
// of the Rust, Python and JavaScript SDKs. Files: package os works in the
// directories the operator's sandbox policy preopens for the plugin.
//
// The bindings of the `provisioner` world are generated into bindings/ (see
// generate.sh); the types below are their names for the WIT records.
package plugin

import (
	"errors"
	"fmt"

	"example.invalid/wasmprov/plugins/sdk-go/bindings/types"
	witTypes "example.invalid/wasmprov/plugins/sdk-go/bindings/wit/types"
	"example.invalid/wasmprov/plugins/sdk-go/hooks"
)

// The WIT records a plugin reads and returns.
type (
	ProvisionRequest = types.ProvisionRequest
	DeleteRequest    = types.DeleteRequest
	Claim            = types.Claim
	StorageClass     = types.StorageClass
	Node             = types.Node
	Volume           = types.Volume
	NodeAffinity     = types.NodeAffinity
	// Pairs is a WIT string map: parameters, labels, annotations.
	Pairs = []witTypes.Tuple2[string, string]
)

// Plugin is a storage backend.
type Plugin interface {
	// Provision creates (or finds again: it must be idempotent) the storage
	// for a claim.
	Provision(request ProvisionRequest) (Volume, error)
	// Delete removes the storage of a released volume; deleting something
	// already gone must succeed.
	Delete(request DeleteRequest) error
}

// BlockVolumes is implemented by a Plugin that provisions `volumeMode:
// Block` claims; without it the host refuses them for the plugin.
type BlockVolumes interface {
	BlockVolumes() bool
}

// Register makes p the plugin of this component. Call it once, from an
// init function of package main.
func Register(p Plugin) {
	block, _ := p.(BlockVolumes)
	hooks.Capabilities = func() types.PluginCapabilities {
		return types.PluginCapabilities{BlockVolumes: block != nil && block.BlockVolumes()}
	}
	hooks.Provision = func(request ProvisionRequest) witTypes.Result[Volume, types.ProvisionError] {
		volume, err := p.Provision(request)
		if err != nil {
			return witTypes.Err[Volume](provisionError(err))
		}
		return witTypes.Ok[Volume, types.ProvisionError](volume)
	}
	hooks.Delete = func(request DeleteRequest) witTypes.Result[witTypes.Unit, types.DeleteError] {
		if err := p.Delete(request); err != nil {
			return witTypes.Err[witTypes.Unit](deleteError(err))
		}
		return witTypes.Ok[witTypes.Unit, types.DeleteError](witTypes.Unit{})
	}
}

// Kind says what the host does after an Answer (see provision-error and
// delete-error in the WIT file).
type Kind int

const (
	// KindFailed: nothing was created (or deleted); trying again may help.
	KindFailed Kind = iota
	// KindInvalidArgument: the request can never succeed as it is.
	KindInvalidArgument
	// KindInBackground: the backend may still be creating the volume.
	KindInBackground
	// KindNoChange: nothing changed since the last attempt.
	KindNoChange
	// KindReschedule: the selected node cannot hold this volume.
	KindReschedule
	// KindIgnored: delete only; this plugin does not own the volume.
	KindIgnored
	// KindParam: a class parameter that cannot be used (invalid-argument;
	// from Delete, failed, saying the recorded parameters are unusable).
	KindParam
)

// Answer is an error that says how the host goes on.
type Answer struct {
	Kind    Kind
	Message string
}

func (a *Answer) Error() string { return a.Message }

func answer(kind Kind, format string, args []any) error {
	return &Answer{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// InvalidArgument: the request can never succeed as it is (a missing or
// invalid class parameter, a zero size...); the host retries only slowly.
func InvalidArgument(format string, args ...any) error {
	return answer(KindInvalidArgument, format, args)
}

// Failed: nothing was created (or deleted) and trying again may help.
func Failed(format string, args ...any) error { return answer(KindFailed, format, args) }

// InBackground: the backend may still be creating the volume; the host
// calls Provision again until it gets a final answer.
func InBackground(format string, args ...any) error {
	return answer(KindInBackground, format, args)
}

// NoChange: nothing changed since the last attempt; retried without a new
// event.
func NoChange(format string, args ...any) error { return answer(KindNoChange, format, args) }

// Reschedule: the selected node cannot hold this volume; the scheduler
// picks another.
func Reschedule(format string, args ...any) error { return answer(KindReschedule, format, args) }

// Ignored: Delete only; this plugin does not own the volume (e.g. it lives
// on another node).
func Ignored(format string, args ...any) error { return answer(KindIgnored, format, args) }

func kindOf(err error) Kind {
	var a *Answer
	if errors.As(err, &a) {
		return a.Kind
	}
	return KindFailed
}

func provisionError(err error) types.ProvisionError {
	message := err.Error()
	switch kindOf(err) {
	case KindInvalidArgument, KindParam:
		return types.MakeProvisionErrorInvalidArgument(message)
	case KindInBackground:
		return types.MakeProvisionErrorInBackground(message)
	case KindNoChange:
		return types.MakeProvisionErrorNoChange(message)
	case KindReschedule:
		return types.MakeProvisionErrorReschedule(message)
	default:
		return types.MakeProvisionErrorFailed(message)
	}
}

func deleteError(err error) types.DeleteError {
	switch kindOf(err) {
	case KindIgnored:
		return types.MakeDeleteErrorIgnored(err.Error())
	case KindParam:
		return types.MakeDeleteErrorFailed("the volume's recorded class parameters are unusable: " + err.Error())
	default:
		return types.MakeDeleteErrorFailed(err.Error())
	}
}

// NewVolume is a volume of capacityBytes reached through source (see
// HostPathSource...), with nothing else set.
func NewVolume(capacityBytes uint64, source string) Volume {
	return Volume{
		CapacityBytes: capacityBytes,
		Source:        source,
		NodeAffinity:  witTypes.None[NodeAffinity](),
	}
}

// Lookup is the value of key in a WIT string map.
func Lookup(pairs Pairs, key string) (string, bool) {
	for _, pair := range pairs {
		if pair.F0 == key {
			return pair.F1, true
		}
	}
	return "", false
}

// PinToNode is a node affinity that pins a volume to one node by its
// kubernetes.io/hostname label (its name when it has none).
func PinToNode(node Node) witTypes.Option[NodeAffinity] {
	hostname, ok := Lookup(node.Labels, HostnameLabel)
	if !ok {
		hostname = node.Name
	}
	return witTypes.Some(NodeAffinity{Terms: []types.NodeSelectorTerm{{
		MatchExpressions: []types.NodeSelectorRequirement{{
			Key: HostnameLabel, Operator: types.NodeSelectorOperatorIn, Values: []string{hostname},
		}},
	}}})
}
