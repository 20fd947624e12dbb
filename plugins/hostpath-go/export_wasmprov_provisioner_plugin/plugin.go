// Package export_wasmprov_provisioner_plugin is the hostpath-go plugin: each
// volume is a directory <hostRoot>/<pv-name> on the node, served to pods as a
// hostPath volume. It is the Go twin of plugins/hostpath (Rust): the same
// class parameters, sandbox policy and answers.
//
// The package name is fixed by `wit-bindgen go`: the generated main package
// calls Capabilities, Provision and Delete here for the exported interface
// wasmprov:provisioner/plugin.
//
// The plugin creates and removes the directory through a preopen that the
// operator's sandbox policy grants: the node directory hostRoot mounted
// read-write at the guest path root (default /volumes). It sees nothing else
// of the node. All decisions are in package hostpath (pure, tested natively);
// this file adds the filesystem calls and logging.
package export_wasmprov_provisioner_plugin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/hostpath"
	"wit_component/wasmprov_provisioner_logging"
	"wit_component/wasmprov_provisioner_types"
)

type (
	provisionResult = witTypes.Result[wasmprov_provisioner_types.Volume, wasmprov_provisioner_types.ProvisionError]
	deleteResult    = witTypes.Result[witTypes.Unit, wasmprov_provisioner_types.DeleteError]
)

// Capabilities: filesystem volumes only.
func Capabilities() wasmprov_provisioner_types.PluginCapabilities {
	return wasmprov_provisioner_types.PluginCapabilities{BlockVolumes: false}
}

// Provision creates <root>/<pv-name> (or finds it again) and returns its
// hostPath volume.
func Provision(request wasmprov_provisioner_types.ProvisionRequest) provisionResult {
	plan, err := hostpath.PlanProvision(request)
	if err != nil {
		return provisionFailure(wasmprov_provisioner_types.MakeProvisionErrorInvalidArgument(err.Error()))
	}
	message := "created volume directory"
	if err := os.Mkdir(plan.GuestDir, 0o777); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return provisionFailed("create %s: %s; %s", plan.GuestDir, reason(err), rootHint(plan.Root))
		}
		// Provisioning again (host restart, failed save): the same directory
		// gives the same volume, as long as it is one.
		info, err := os.Lstat(plan.GuestDir)
		if err != nil {
			return provisionFailed("inspect %s: %s", plan.GuestDir, reason(err))
		}
		if !info.IsDir() {
			return provisionFailed("%s (%s) exists but is not a directory; remove it or pick another hostRoot",
				plan.GuestDir, plan.HostDir)
		}
		message = "volume directory already exists"
	}
	logInfo(message, request.PvName, plan.HostDir)
	return witTypes.Ok[wasmprov_provisioner_types.Volume, wasmprov_provisioner_types.ProvisionError](plan.Volume)
}

// Delete removes <root>/<pv-name> recursively (symlinks inside are removed,
// not followed). A directory already gone is success if the root is visible.
func Delete(request wasmprov_provisioner_types.DeleteRequest) deleteResult {
	plan, err := hostpath.PlanDelete(request)
	if err != nil {
		return deleteFailed("%v", err)
	}
	message := "removed volume directory"
	info, err := os.Lstat(plan.GuestDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Already gone is success, but only if the root is visible at all:
		// a missing preopen must not pass for a deleted volume.
		if root, err := os.Stat(plan.Root); err != nil || !root.IsDir() {
			return deleteFailed("remove %s: the root %s is not visible; %s", plan.GuestDir, plan.Root, rootHint(plan.Root))
		}
		message = "volume directory already gone"
	case err != nil:
		return deleteFailed("remove %s: %s; %s", plan.GuestDir, reason(err), rootHint(plan.Root))
	case info.IsDir():
		if err := os.RemoveAll(plan.GuestDir); err != nil {
			return deleteFailed("remove %s: %s; %s", plan.GuestDir, reason(err), rootHint(plan.Root))
		}
	case info.Mode()&fs.ModeSymlink != 0:
		// As the Rust plugin's remove_dir_all: the link goes, not its target.
		if err := os.Remove(plan.GuestDir); err != nil {
			return deleteFailed("remove %s: %s; %s", plan.GuestDir, reason(err), rootHint(plan.Root))
		}
	default:
		return deleteFailed("remove %s (%s): it is not a directory; nothing was removed", plan.GuestDir, plan.HostDir)
	}
	logInfo(message, request.PvName, plan.HostDir)
	return witTypes.Ok[witTypes.Unit, wasmprov_provisioner_types.DeleteError](witTypes.Unit{})
}

func provisionFailure(e wasmprov_provisioner_types.ProvisionError) provisionResult {
	return witTypes.Err[wasmprov_provisioner_types.Volume](e)
}

func provisionFailed(format string, args ...any) provisionResult {
	return provisionFailure(wasmprov_provisioner_types.MakeProvisionErrorFailed(fmt.Sprintf(format, args...)))
}

func deleteFailed(format string, args ...any) deleteResult {
	return witTypes.Err[witTypes.Unit](wasmprov_provisioner_types.MakeDeleteErrorFailed(fmt.Sprintf(format, args...)))
}

// reason is the OS error without the operation and path that os adds
// (the messages name the path themselves).
func reason(err error) string {
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return pathErr.Err.Error()
	}
	return err.Error()
}

func rootHint(root string) string {
	return fmt.Sprintf("does the sandbox policy preopen %s read-write? (class parameter \"root\", "+
		"default /volumes, must name the guest path of the preopen of hostRoot)", root)
}

func logInfo(message, pv, path string) {
	wasmprov_provisioner_logging.Log(wasmprov_provisioner_logging.LevelInfo, message,
		[]witTypes.Tuple2[string, string]{{F0: "pv", F1: pv}, {F0: "path", F1: path}})
}
