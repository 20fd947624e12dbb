// Package export_wasmprov_provisioner_plugin is the go-misbehave test guest:
// the class parameter "behavior" says what provision does.
//
//   - ok:        returns a hostPath volume at /tmp/ok/<pv-name>, made as
//     /ok/<pv-name> when the sandbox preopens /tmp/ok there (the host
//     refuses a hostPath it cannot see).
//   - count:     the same, annotated with how many calls this instance served
//     (go-misbehave.test/calls) and the Go heap in use
//     (go-misbehave.test/heap-bytes): a fresh instance per call always says 1.
//   - goroutine: starts a goroutine that would run forever, then answers ok.
//   - garbage:   allocates 256 MiB in 1 MiB pieces it drops at once, then
//     answers ok: the Go GC must keep it under the memory limit.
//   - oom:       keeps every allocation until the memory limit stops it.
//   - loop:      spins until the time budget stops it.
//   - panic:     panics (a trap).
package export_wasmprov_provisioner_plugin

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	types "wit_component/wasmprov_provisioner_types"
)

// Package state: starts at zero in every instance.
var calls int

// sink keeps allocations reachable (oom) or observable (garbage).
var sink [][]byte

func Capabilities() types.PluginCapabilities {
	return types.PluginCapabilities{BlockVolumes: false}
}

func Provision(request types.ProvisionRequest) witTypes.Result[types.Volume, types.ProvisionError] {
	calls++
	behavior := ""
	for _, kv := range request.StorageClass.Parameters {
		if kv.F0 == "behavior" {
			behavior = kv.F1
		}
	}
	var annotations []witTypes.Tuple2[string, string]
	switch behavior {
	case "ok":
	case "count":
		var stats runtime.MemStats
		runtime.ReadMemStats(&stats)
		annotations = []witTypes.Tuple2[string, string]{
			{F0: "go-misbehave.test/calls", F1: strconv.Itoa(calls)},
			{F0: "go-misbehave.test/heap-bytes", F1: strconv.FormatUint(stats.HeapAlloc, 10)},
		}
	case "goroutine":
		go func() {
			for {
				time.Sleep(time.Millisecond)
			}
		}()
		runtime.Gosched()
	case "garbage":
		for i := 0; i < 256; i++ {
			piece := make([]byte, 1<<20)
			piece[i] = byte(i)
			sink = [][]byte{piece}
		}
		sink = nil
	case "oom":
		for i := 0; ; i++ {
			piece := make([]byte, 1<<20)
			piece[i%len(piece)] = 1
			sink = append(sink, piece)
		}
	case "loop":
		for i := uint64(0); ; i++ {
			if i == ^uint64(0) {
				break
			}
		}
		return failed("the loop ended")
	case "panic":
		panic("go-misbehave: deliberate panic")
	default:
		return witTypes.Err[types.Volume](types.MakeProvisionErrorInvalidArgument(
			fmt.Sprintf("unknown behavior %q", behavior)))
	}
	_ = os.MkdirAll("/ok/"+request.PvName, 0o755)
	return witTypes.Ok[types.Volume, types.ProvisionError](types.Volume{
		CapacityBytes: request.Claim.RequestedBytes,
		Source:        fmt.Sprintf(`{"hostPath":{"path":"/tmp/ok/%s"}}`, request.PvName),
		NodeAffinity:  witTypes.None[types.NodeAffinity](),
		Annotations:   annotations,
	})
}

func Delete(request types.DeleteRequest) witTypes.Result[witTypes.Unit, types.DeleteError] {
	_ = os.Remove("/ok/" + request.PvName)
	return witTypes.Ok[witTypes.Unit, types.DeleteError](witTypes.Unit{})
}

func failed(message string) witTypes.Result[types.Volume, types.ProvisionError] {
	return witTypes.Err[types.Volume](types.MakeProvisionErrorFailed(message))
}
