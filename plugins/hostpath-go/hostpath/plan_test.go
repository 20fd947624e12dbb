package hostpath

// The same cases as plugins/hostpath/src/plan.rs. Run natively (no wasm):
// bash plugins/build.sh && (cd target/wasm-build/go/hostpath-go && go test ./hostpath/)

import (
	"encoding/json"
	"strings"
	"testing"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
	types "wit_component/wasmprov_provisioner_types"
)

func params(pairs ...string) StringMap {
	var m StringMap
	for i := 0; i+1 < len(pairs); i += 2 {
		m = append(m, witTypes.Tuple2[string, string]{F0: pairs[i], F1: pairs[i+1]})
	}
	return m
}

func request(parameters StringMap) ProvisionRequest {
	return ProvisionRequest{
		PvName: "pvc-1234",
		Claim: types.Claim{
			Name:           "data",
			Namespace:      "default",
			Uid:            "1234",
			RequestedBytes: 1 << 30,
			LimitBytes:     witTypes.None[uint64](),
			AccessModes:    []types.AccessMode{types.AccessModeReadWriteOnce},
			VolumeMode:     types.VolumeModeFilesystem,
			Selector:       witTypes.None[types.LabelSelector](),
			DataSource:     witTypes.None[types.DataSource](),
		},
		StorageClass: types.StorageClass{
			Name:              "hostpath",
			Provisioner:       "wasmprov.io/host",
			Parameters:        parameters,
			ReclaimPolicy:     types.ReclaimPolicyDelete,
			VolumeBindingMode: types.VolumeBindingModeImmediate,
		},
		SelectedNode: witTypes.None[Node](),
	}
}

func deleteRequest(source string, parameters StringMap) DeleteRequest {
	return DeleteRequest{
		PvName:         "pvc-1234",
		Source:         source,
		CapacityBytes:  1 << 30,
		Parameters:     parameters,
		ClaimNamespace: "default",
		ClaimName:      "data",
	}
}

func refused(t *testing.T, r ProvisionRequest, want string) {
	t.Helper()
	_, err := PlanProvision(r)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("expected an error containing %q, got %v", want, err)
	}
}

func TestParsesDefaults(t *testing.T) {
	p, err := ParseParams(params("hostRoot", "/var/lib/x/"), true)
	want := Params{HostRoot: "/var/lib/x", Root: "/volumes", NodeAffinity: false}
	if err != nil || p != want {
		t.Fatalf("got %+v, %v", p, err)
	}
}

func TestParsesAllParameters(t *testing.T) {
	p, err := ParseParams(params("hostRoot", "/srv/pv", "root", "/data", "nodeAffinity", "true"), true)
	if err != nil || p.Root != "/data" || !p.NodeAffinity {
		t.Fatalf("got %+v, %v", p, err)
	}
	if dir, _ := p.GuestDir("pvc-1"); dir != "/data/pvc-1" {
		t.Errorf("guest dir %q", dir)
	}
	if dir, _ := p.HostDir("pvc-1"); dir != "/srv/pv/pvc-1" {
		t.Errorf("host dir %q", dir)
	}
}

func TestRejectsUnknownParametersByName(t *testing.T) {
	_, err := ParseParams(params("hostRoot", "/srv", "hostroot", "/x", "nodeAfinity", "true"), true)
	if err == nil || !strings.Contains(err.Error(), `"hostroot", "nodeAfinity"`) ||
		!strings.Contains(err.Error(), `"hostRoot", "root", "nodeAffinity"`) {
		t.Fatalf("got %v", err)
	}
	// ...but delete ignores them.
	if _, err := ParseParams(params("hostRoot", "/srv", "extra", "1"), false); err != nil {
		t.Fatal(err)
	}
}

func TestRequiresHostRoot(t *testing.T) {
	_, err := ParseParams(params("root", "/data"), true)
	if err == nil || !strings.Contains(err.Error(), `missing class parameter "hostRoot"`) {
		t.Fatalf("got %v", err)
	}
}

func TestRejectsBadPaths(t *testing.T) {
	for _, bad := range []string{"relative", "", "/a/../b", "/a/./b", "/a//b", "/a\nb", "/.."} {
		if _, err := ParseParams(params("hostRoot", bad), true); err == nil || !strings.Contains(err.Error(), `"hostRoot"`) {
			t.Errorf("hostRoot %q: %v", bad, err)
		}
		if _, err := ParseParams(params("hostRoot", "/ok", "root", bad), true); err == nil || !strings.Contains(err.Error(), `"root"`) {
			t.Errorf("root %q: %v", bad, err)
		}
	}
	if _, err := ParseParams(params("hostRoot", "/"), true); err == nil || !strings.Contains(err.Error(), `must not be "/"`) {
		t.Errorf("hostRoot /: %v", err)
	}
	// A guest root of / is fine (the policy may preopen the directory there).
	p, err := ParseParams(params("hostRoot", "/srv", "root", "/"), true)
	if dir, _ := p.GuestDir("pvc-1"); err != nil || dir != "/pvc-1" {
		t.Errorf("root /: %q, %v", dir, err)
	}
}

func TestNodeAffinityIsStrictlyBoolean(t *testing.T) {
	for value, want := range map[string]bool{"true": true, "false": false} {
		p, err := ParseParams(params("hostRoot", "/srv", "nodeAffinity", value), true)
		if err != nil || p.NodeAffinity != want {
			t.Errorf("%q: %+v, %v", value, p, err)
		}
	}
	for _, bad := range []string{"True", "yes", "1", ""} {
		if _, err := ParseParams(params("hostRoot", "/srv", "nodeAffinity", bad), true); err == nil ||
			!strings.Contains(err.Error(), "nodeAffinity") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestSourceJSONIsEscaped(t *testing.T) {
	source := HostPathSource(`/srv/we"ird\dir/<pvc-1>`, "DirectoryOrCreate")
	var value map[string]map[string]string
	if err := json.Unmarshal([]byte(source), &value); err != nil {
		t.Fatal(err)
	}
	if value["hostPath"]["path"] != `/srv/we"ird\dir/<pvc-1>` || value["hostPath"]["type"] != "DirectoryOrCreate" {
		t.Errorf("%s", source)
	}
	if path, err := HostPathOf(source); err != nil || path != `/srv/we"ird\dir/<pvc-1>` {
		t.Errorf("%q, %v", path, err)
	}
	// The same bytes as the Rust SDK (no HTML escaping of < >).
	if want := `{"hostPath":{"path":"/srv/we\"ird\\dir/<pvc-1>","type":"DirectoryOrCreate"}}`; source != want {
		t.Errorf("got %s, want %s", source, want)
	}
	if HostPathSource("/x", "") != `{"hostPath":{"path":"/x"}}` {
		t.Errorf("without type: %s", HostPathSource("/x", ""))
	}
}

func TestPlansAVolume(t *testing.T) {
	plan, err := PlanProvision(request(params("hostRoot", "/var/lib/wasmprov/hostpath")))
	if err != nil {
		t.Fatal(err)
	}
	if plan.GuestDir != "/volumes/pvc-1234" || plan.HostDir != "/var/lib/wasmprov/hostpath/pvc-1234" {
		t.Errorf("%+v", plan)
	}
	if plan.Volume.CapacityBytes != 1<<30 || plan.Volume.NodeAffinity.IsSome() {
		t.Errorf("%+v", plan.Volume)
	}
	if want := `{"hostPath":{"path":"/var/lib/wasmprov/hostpath/pvc-1234","type":"DirectoryOrCreate"}}`; plan.Volume.Source != want {
		t.Errorf("source %s", plan.Volume.Source)
	}
}

func TestRejectsBadClaims(t *testing.T) {
	ok := params("hostRoot", "/srv")
	r := request(ok)
	r.Claim.RequestedBytes = 0
	refused(t, r, "0 bytes")

	r = request(ok)
	r.Claim.AccessModes = nil
	refused(t, r, "no access modes")

	r = request(ok)
	r.Claim.VolumeMode = types.VolumeModeBlock
	refused(t, r, "block")

	r = request(ok)
	r.Claim.DataSource = witTypes.Some(types.DataSource{
		ApiGroup: "snapshot.storage.k8s.io", Kind: "VolumeSnapshot", Name: "snap",
		Namespace: witTypes.None[string](),
	})
	refused(t, r, "VolumeSnapshot")

	r = request(ok)
	r.Claim.Selector = witTypes.Some(types.LabelSelector{})
	refused(t, r, "selector")

	for _, name := range []string{"..", "../../etc", "pvc/x", "", "PVC-1", "-pvc"} {
		r = request(ok)
		r.PvName = name
		refused(t, r, "invalid volume name")
	}

	refused(t, request(params("hostRoot", "/srv", "hostroot", "/srv")), `"hostroot"`)
}

func TestNodeAffinityNeedsASelectedNode(t *testing.T) {
	r := request(params("hostRoot", "/srv", "nodeAffinity", "true"))
	refused(t, r, "set it to WaitForFirstConsumer")

	r.StorageClass.VolumeBindingMode = types.VolumeBindingModeWaitForFirstConsumer
	refused(t, r, "no node was selected")

	r.SelectedNode = witTypes.Some(Node{Name: "node-a", Labels: params("kubernetes.io/hostname", "host-a")})
	plan, err := PlanProvision(r)
	if err != nil {
		t.Fatal(err)
	}
	requirement := plan.Volume.NodeAffinity.Some().Terms[0].MatchExpressions[0]
	if requirement.Key != "kubernetes.io/hostname" || requirement.Operator != types.NodeSelectorOperatorIn ||
		len(requirement.Values) != 1 || requirement.Values[0] != "host-a" {
		t.Errorf("%+v", requirement)
	}

	// Without the hostname label, the node name is the best guess.
	r.SelectedNode = witTypes.Some(Node{Name: "node-b"})
	plan, err = PlanProvision(r)
	if err != nil || plan.Volume.NodeAffinity.Some().Terms[0].MatchExpressions[0].Values[0] != "node-b" {
		t.Errorf("%+v, %v", plan.Volume.NodeAffinity, err)
	}
}

func TestDeleteChecksTheSource(t *testing.T) {
	p := params("hostRoot", "/srv/pv", "root", "/data")
	plan, err := PlanDelete(deleteRequest(`{"hostPath":{"path":"/srv/pv/pvc-1234"}}`, p))
	if err != nil || plan.GuestDir != "/data/pvc-1234" {
		t.Fatalf("%+v, %v", plan, err)
	}
	// A trailing slash is not a mismatch.
	if _, err := PlanDelete(deleteRequest(`{"hostPath":{"path":"/srv/pv/pvc-1234/"}}`, p)); err != nil {
		t.Error(err)
	}
	for _, source := range []string{
		`{"hostPath":{"path":"/srv/pv/other"}}`,
		`{"hostPath":{"path":"/srv/pv/../pv/pvc-1234"}}`,
		`{"hostPath":{"path":"/"}}`,
		`{"hostPath":{"path":5}}`,
		`{"nfs":{"server":"x","path":"/srv/pv/pvc-1234"}}`,
		`not json`,
	} {
		if _, err := PlanDelete(deleteRequest(source, p)); err == nil || !strings.Contains(err.Error(), "refusing to delete") {
			t.Errorf("%s: %v", source, err)
		}
	}

	r := deleteRequest(`{"hostPath":{"path":"/srv/pv/.."}}`, p)
	r.PvName = ".."
	if _, err := PlanDelete(r); err == nil {
		t.Error("pv name .. was accepted")
	}

	if _, err := PlanDelete(deleteRequest(`{"hostPath":{"path":"/srv/pv/pvc-1234"}}`, nil)); err == nil ||
		!strings.Contains(err.Error(), "hostRoot") {
		t.Errorf("no parameters: %v", err)
	}
}
