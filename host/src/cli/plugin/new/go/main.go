// The {{name}} plugin for wasmprov: each volume is a directory
// <hostRoot>/<pv-name> on the node, served to pods as a hostPath volume.
//
// The plugin sees the node only through the directory the operator's
// sandbox policy preopens for it: hostRoot at the guest path root.
//
// StorageClass parameters:
//   - hostRoot (required): the directory on the node that holds the volumes;
//   - root (default /volumes): where the policy preopens hostRoot.
//
// Unknown parameters are refused, so that an operator's typo is reported
// instead of ignored. Change what you need: `wasmprov plugin test` says what
// the host expects of every answer.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	plugin "{{go_sdk_module}}"
)

const (
	pluginName    = "{{name}}"
	hostRootParam = "hostRoot"
	rootParam     = "root"
	defaultRoot   = "/volumes"
	rootWhat      = "where the policy preopens hostRoot"
)

type volumes struct{}

func (volumes) Provision(request plugin.ProvisionRequest) (plugin.Volume, error) {
	params := plugin.NewParams(pluginName, request.StorageClass.Parameters)
	if err := params.RejectUnknown(hostRootParam, rootParam); err != nil {
		return plugin.Volume{}, err
	}
	hostRoot, err := params.AbsPath(hostRootParam, "",
		"the directory on the node that holds the volumes, e.g. /var/lib/{{name}}")
	if err != nil {
		return plugin.Volume{}, err
	}
	root, err := params.AbsPath(rootParam, defaultRoot, rootWhat)
	if err != nil {
		return plugin.Volume{}, err
	}
	// A size above 0, a filesystem volume, a safe pv-name.
	size, err := plugin.CheckFilesystemClaim(pluginName, request)
	if err != nil {
		return plugin.Volume{}, err
	}
	dir, err := plugin.Join(root, request.PvName)
	if err != nil {
		return plugin.Volume{}, plugin.InvalidArgument("%s", err)
	}
	hostDir, err := plugin.Join(hostRoot, request.PvName)
	if err != nil {
		return plugin.Volume{}, plugin.InvalidArgument("%s", err)
	}
	// Asked again after a restart: the same directory is the same volume.
	if err := os.Mkdir(dir, 0o755); err == nil {
		plugin.LogInfo("created volume directory", "path", hostDir)
	} else if !errors.Is(err, fs.ErrExist) || !isDir(dir) {
		return plugin.Volume{}, plugin.Failed("%s; the policy must preopen %s read-write at %s", err, hostRoot, root)
	}
	// Who the volume belongs to, for whoever finds it on the node.
	readme := fmt.Sprintf("Volume %s of the claim %s/%s, made by the %s plugin of wasmprov.\n",
		request.PvName, request.Claim.Namespace, request.Claim.Name, pluginName)
	if err := os.WriteFile(dir+"/README.txt", []byte(readme), 0o644); err != nil {
		return plugin.Volume{}, plugin.Failed("%s", err)
	}
	return plugin.NewVolume(size, plugin.HostPathSource(hostDir, "Directory")), nil
}

func (volumes) Delete(request plugin.DeleteRequest) error {
	params := plugin.NewParams(pluginName, request.Parameters)
	root, err := params.AbsPath(rootParam, defaultRoot, rootWhat)
	if err != nil {
		return err
	}
	dir, err := plugin.Join(root, request.PvName)
	if err != nil {
		return plugin.Failed("%s", err)
	}
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		// Already gone is success (the host retries deletes), as long as
		// the root is there: a missing preopen is not a deleted volume.
		if !isDir(root) {
			return plugin.Failed("%s is missing; the policy must preopen hostRoot at %s", root, root)
		}
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return plugin.Failed("%s", err)
	}
	plugin.LogInfo("removed volume directory", "path", dir)
	return nil
}

func isDir(path string) bool {
	info, err := os.Lstat(path)
	return err == nil && info.IsDir()
}

func init() { plugin.Register(volumes{}) }

func main() {}
