// Package hostpath holds the decisions of the hostpath-go plugin without any
// I/O: parameter parsing, request validation, naming and the returned volume.
// The exported functions in ../export_wasmprov_provisioner_plugin only add
// the filesystem calls and logging, so everything here is unit-tested
// natively (see plan_test.go and plugins/README.md, "Go").
//
// It is the Go twin of plugins/hostpath/src/plan.rs: same parameters, same
// answers, same volumes, so a class can switch between the two plugins.
package hostpath

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	"wit_component/wasmprov_provisioner_types"
)

// Short names for the generated WIT types.
type (
	ProvisionRequest = wasmprov_provisioner_types.ProvisionRequest
	DeleteRequest    = wasmprov_provisioner_types.DeleteRequest
	Volume           = wasmprov_provisioner_types.Volume
	Node             = wasmprov_provisioner_types.Node
	NodeAffinity     = wasmprov_provisioner_types.NodeAffinity
	StringMap        = []witTypes.Tuple2[string, string]
)

const (
	// Plugin is the plugin's name in messages.
	Plugin = "hostpath-go"
	// ParamHostRoot is the absolute directory on the node under which volumes live.
	ParamHostRoot = "hostRoot"
	// ParamRoot is the guest path where the sandbox policy preopens hostRoot.
	ParamRoot = "root"
	// ParamNodeAffinity set to "true" pins each volume to the selected node.
	ParamNodeAffinity = "nodeAffinity"
	// DefaultRoot is the default of ParamRoot.
	DefaultRoot = "/volumes"
	// HostnameLabel is the node label node affinity is expressed with.
	HostnameLabel = "kubernetes.io/hostname"
	// MaxComponentLen is the longest file name most filesystems accept.
	MaxComponentLen = 255
	// MaxNameLen is the longest Kubernetes object name.
	MaxNameLen = 253
)

// KnownParams lists every class parameter the plugin understands.
var KnownParams = []string{ParamHostRoot, ParamRoot, ParamNodeAffinity}

// Params is the plugin's configuration, from the StorageClass parameters.
type Params struct {
	// HostRoot is the directory on the node, e.g. /var/lib/wasmprov/hostpath
	// (normalized, no trailing slash).
	HostRoot string
	// Root is the same directory as the plugin sees it, e.g. /volumes.
	Root string
	// NodeAffinity pins volumes to the selected node.
	NodeAffinity bool
}

// Lookup returns the value of key in a WIT string map.
func Lookup(m StringMap, key string) (string, bool) {
	for _, kv := range m {
		if kv.F0 == key {
			return kv.F1, true
		}
	}
	return "", false
}

// ParseParams parses class parameters. rejectUnknown refuses parameters the
// plugin does not know (provision: a typo must not pass silently); delete
// ignores them (removing a volume must not depend on parameters that do not
// affect where it is). The error is a message for the claim's events.
func ParseParams(params StringMap, rejectUnknown bool) (Params, error) {
	if rejectUnknown {
		var unknown []string
		for _, kv := range params {
			if !slices.Contains(KnownParams, kv.F0) {
				unknown = append(unknown, kv.F0)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			plural := "s"
			if len(unknown) == 1 {
				plural = ""
			}
			return Params{}, fmt.Errorf("unknown class parameter%s %s: the %s plugin accepts only %s "+
				"(parameter names are case-sensitive)", plural, quoteList(unknown), Plugin, quoteList(KnownParams))
		}
	}
	hostRoot, err := absPath(params, ParamHostRoot, "",
		"the absolute directory on the node under which volumes are created, e.g. hostRoot: /var/lib/wasmprov/hostpath")
	if err != nil {
		return Params{}, err
	}
	if hostRoot == "/" {
		return Params{}, fmt.Errorf("class parameter %q must not be \"/\": volumes would be created directly "+
			"in the node's root directory; use a dedicated directory such as /var/lib/wasmprov/hostpath", ParamHostRoot)
	}
	root, err := absPath(params, ParamRoot, DefaultRoot, "")
	if err != nil {
		return Params{}, err
	}
	nodeAffinity := false
	if value, ok := Lookup(params, ParamNodeAffinity); ok {
		switch value {
		case "true":
			nodeAffinity = true
		case "false":
		default:
			return Params{}, fmt.Errorf("class parameter %q is %q: it must be \"true\" or \"false\"", ParamNodeAffinity, value)
		}
	}
	return Params{HostRoot: hostRoot, Root: root, NodeAffinity: nodeAffinity}, nil
}

// absPath reads an absolute path parameter; def == "" makes it required.
func absPath(params StringMap, key, def, what string) (string, error) {
	value, ok := Lookup(params, key)
	if !ok {
		if def == "" {
			return "", fmt.Errorf("missing class parameter %q: the %s plugin needs it; set it to %s", key, Plugin, what)
		}
		value = def
	}
	normalized, err := NormalizeAbs(value)
	if err != nil {
		return "", fmt.Errorf("class parameter %q is %q: it must be an absolute, normalized path: %v", key, value, err)
	}
	return normalized, nil
}

// GuestDir is where a volume's directory is inside the sandbox.
func (p Params) GuestDir(pvName string) (string, error) { return Join(p.Root, pvName) }

// HostDir is where a volume's directory is on the node.
func (p Params) HostDir(pvName string) (string, error) { return Join(p.HostRoot, pvName) }

// ProvisionPlan is everything provision does, decided before touching the
// filesystem.
type ProvisionPlan struct {
	// GuestDir is the directory to create inside the sandbox.
	GuestDir string
	// HostDir is the same directory on the node.
	HostDir string
	// Root is the guest root it lives in (for error messages).
	Root string
	// Volume is what to return once the directory exists.
	Volume Volume
}

// PlanProvision validates a provision request and decides what to create and
// return. Every error it returns is an invalid-argument answer: the request
// can never succeed as it is.
func PlanProvision(request ProvisionRequest) (ProvisionPlan, error) {
	params, err := ParseParams(request.StorageClass.Parameters, true)
	if err != nil {
		return ProvisionPlan{}, err
	}
	size, err := CheckFilesystemClaim(request)
	if err != nil {
		return ProvisionPlan{}, err
	}
	affinity := witTypes.None[NodeAffinity]()
	if params.NodeAffinity {
		node, err := SelectedNode(request, fmt.Sprintf(
			"class parameter %s=\"true\" (set it to \"false\" to allow any node)", ParamNodeAffinity))
		if err != nil {
			return ProvisionPlan{}, err
		}
		affinity = witTypes.Some(PinToNode(node))
	}
	hostDir, err := params.HostDir(request.PvName)
	if err != nil {
		return ProvisionPlan{}, err
	}
	guestDir, err := params.GuestDir(request.PvName)
	if err != nil {
		return ProvisionPlan{}, err
	}
	return ProvisionPlan{
		GuestDir: guestDir,
		HostDir:  hostDir,
		Root:     params.Root,
		Volume: Volume{
			CapacityBytes: size,
			Source:        HostPathSource(hostDir, "DirectoryOrCreate"),
			NodeAffinity:  affinity,
		},
	}, nil
}

// DeletePlan says where the directory of a volume to delete is.
type DeletePlan struct {
	// GuestDir is the directory to remove recursively, inside the sandbox.
	GuestDir string
	// HostDir is the same directory on the node.
	HostDir string
	// Root is the guest root it lives in (for error messages).
	Root string
}

// PlanDelete checks that a volume is one this plugin made with these
// parameters and finds its directory. Every error it returns is a failed
// answer: anything unexpected fails, never delete something else.
func PlanDelete(request DeleteRequest) (DeletePlan, error) {
	pv := request.PvName
	params, err := ParseParams(request.Parameters, false)
	if err != nil {
		return DeletePlan{}, fmt.Errorf("cannot delete volume %s: its recorded class parameters are unusable: %v", pv, err)
	}
	if err := CheckPVName(pv); err != nil {
		return DeletePlan{}, fmt.Errorf("refusing to delete: %v", err)
	}
	hostDir, err := params.HostDir(pv)
	if err != nil {
		return DeletePlan{}, fmt.Errorf("refusing to delete: %v", err)
	}
	actual, err := HostPathOf(request.Source)
	if err != nil {
		return DeletePlan{}, fmt.Errorf("refusing to delete volume %s: %v; expected a hostPath source at %s", pv, err, hostDir)
	}
	// Compare normalized forms so a trailing slash is not a mismatch, while
	// any other difference (another directory, "..") is.
	if strings.TrimRight(actual, "/") != hostDir {
		return DeletePlan{}, fmt.Errorf("refusing to delete volume %s: its source hostPath.path is %q but "+
			"%s=%q puts this volume at %q; it was not created by these parameters, so nothing was removed",
			pv, actual, ParamHostRoot, params.HostRoot, hostDir)
	}
	guestDir, err := params.GuestDir(pv)
	if err != nil {
		return DeletePlan{}, fmt.Errorf("refusing to delete: %v", err)
	}
	return DeletePlan{GuestDir: guestDir, HostDir: hostDir, Root: params.Root}, nil
}

// CheckFilesystemClaim makes the usual checks of a plugin that provides
// filesystem volumes it creates empty, and returns the requested size.
func CheckFilesystemClaim(request ProvisionRequest) (uint64, error) {
	claim := request.Claim
	switch {
	case claim.RequestedBytes == 0:
		return 0, fmt.Errorf("the claim requests 0 bytes: set spec.resources.requests.storage to a positive size")
	case len(claim.AccessModes) == 0:
		return 0, fmt.Errorf("the claim has no access modes: set spec.accessModes, e.g. [ReadWriteOnce]")
	case claim.VolumeMode == wasmprov_provisioner_types.VolumeModeBlock:
		return 0, fmt.Errorf("the claim asks for a block volume (volumeMode: Block); the %s plugin only "+
			"provides filesystem volumes", Plugin)
	case claim.DataSource.IsSome():
		source := claim.DataSource.Some()
		return 0, fmt.Errorf("the claim wants its data copied from %s %q; the %s plugin cannot "+
			"pre-populate volumes (no snapshots or cloning)", source.Kind, source.Name, Plugin)
	case claim.Selector.IsSome():
		return 0, fmt.Errorf("the claim has a spec.selector; the %s plugin cannot select among existing "+
			"volumes: remove the selector", Plugin)
	}
	if err := CheckPVName(request.PvName); err != nil {
		return 0, err
	}
	return claim.RequestedBytes, nil
}

// SelectedNode returns the node the scheduler picked, or an error saying how
// to fix the class; neededBy names what needs it.
func SelectedNode(request ProvisionRequest, neededBy string) (Node, error) {
	if request.SelectedNode.IsSome() {
		return request.SelectedNode.Some(), nil
	}
	fix := "the class waits for the first consumer but no node was selected yet " +
		"(with `wasmprov plugin invoke`, pass --node)"
	if request.StorageClass.VolumeBindingMode == wasmprov_provisioner_types.VolumeBindingModeImmediate {
		fix = "the StorageClass has volumeBindingMode: Immediate; set it to WaitForFirstConsumer"
	}
	return Node{}, fmt.Errorf("%s pins the volume to the selected node, but the request has none: %s", neededBy, fix)
}

// PinToNode restricts a volume to one node: kubernetes.io/hostname In
// [the node's hostname label, else its name].
func PinToNode(node Node) NodeAffinity {
	hostname, ok := Lookup(node.Labels, HostnameLabel)
	if !ok {
		hostname = node.Name
	}
	return NodeAffinity{Terms: []wasmprov_provisioner_types.NodeSelectorTerm{{
		MatchExpressions: []wasmprov_provisioner_types.NodeSelectorRequirement{{
			Key:      HostnameLabel,
			Operator: wasmprov_provisioner_types.NodeSelectorOperatorIn,
			Values:   []string{hostname},
		}},
	}}}
}

// NormalizeAbs checks that a path is absolute and normalized (no empty, "."
// or ".." components, no control characters) and drops trailing slashes.
func NormalizeAbs(value string) (string, error) {
	if !strings.HasPrefix(value, "/") {
		return "", fmt.Errorf("it does not start with /")
	}
	if strings.IndexFunc(value, unicode.IsControl) >= 0 {
		return "", fmt.Errorf("it contains control characters")
	}
	trimmed := strings.TrimRight(value, "/")
	if trimmed == "" {
		return "/", nil
	}
	for _, component := range strings.Split(trimmed[1:], "/") {
		switch component {
		case "":
			return "", fmt.Errorf("it contains an empty component (//)")
		case ".", "..":
			return "", fmt.Errorf("it contains a . or .. component")
		}
	}
	return trimmed, nil
}

// CheckComponent accepts a single safe file name: not empty, not "." or
// "..", no "/", no control characters, at most 255 bytes.
func CheckComponent(name string) error {
	var why string
	switch {
	case name == "":
		why = "it is empty"
	case name == "." || name == "..":
		why = "it is . or .."
	case strings.Contains(name, "/"):
		why = "it contains /"
	case strings.IndexFunc(name, unicode.IsControl) >= 0:
		why = "it contains control characters"
	case len(name) > MaxComponentLen:
		why = "it is longer than 255 bytes"
	default:
		return nil
	}
	return fmt.Errorf("%q is not a single safe file name: %s", name, why)
}

// Join puts one checked component under a root: never an escape.
func Join(root, name string) (string, error) {
	if err := CheckComponent(name); err != nil {
		return "", err
	}
	if root == "/" {
		return "/" + name, nil
	}
	return root + "/" + name, nil
}

// CheckPVName accepts a lowercase DNS name ([a-z0-9]([-a-z0-9.]*[a-z0-9])?,
// at most 253 characters): a single directory name under the root.
func CheckPVName(name string) error {
	alnum := func(b byte) bool { return (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9') }
	ok := name != "" && len(name) <= MaxNameLen && alnum(name[0]) && alnum(name[len(name)-1])
	for i := 0; ok && i < len(name); i++ {
		ok = alnum(name[i]) || name[i] == '-' || name[i] == '.'
	}
	if ok {
		return nil
	}
	return fmt.Errorf("invalid volume name %q: it must be a lowercase DNS name "+
		"([a-z0-9]([-a-z0-9.]*[a-z0-9])?, at most %d characters) "+
		"so that it is a single directory name under the root", name, MaxNameLen)
}

type hostPath struct {
	Path string `json:"path"`
	Type string `json:"type,omitempty"`
}

type hostPathSource struct {
	HostPath *hostPath `json:"hostPath"`
}

// HostPathSource is a hostPath PersistentVolumeSource as JSON; kind (e.g.
// DirectoryOrCreate) may be empty. The same bytes as the Rust SDK's
// source::host_path.
func HostPathSource(path, kind string) string {
	var out bytes.Buffer
	encoder := json.NewEncoder(&out)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(hostPathSource{&hostPath{Path: path, Type: kind}}); err != nil {
		// A struct of strings always encodes.
		panic(err)
	}
	return strings.TrimSuffix(out.String(), "\n")
}

// HostPathOf reads hostPath.path from a PersistentVolumeSource in JSON.
func HostPathOf(source string) (string, error) {
	var parsed any
	if err := json.Unmarshal([]byte(source), &parsed); err != nil {
		return "", fmt.Errorf("the source is not JSON (%v)", err)
	}
	object, _ := parsed.(map[string]any)
	inner, _ := object["hostPath"].(map[string]any)
	path, ok := inner["path"].(string)
	if !ok {
		return "", fmt.Errorf("the source has no hostPath.path")
	}
	return path, nil
}

func quoteList(items []string) string {
	quoted := make([]string, len(items))
	for i, item := range items {
		quoted[i] = fmt.Sprintf("%q", item)
	}
	return strings.Join(quoted, ", ")
}
