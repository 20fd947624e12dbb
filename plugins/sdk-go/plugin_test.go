package plugin

import (
	"strings"
	"testing"

	"example.invalid/wasmprov/plugins/sdk-go/bindings/types"
	witTypes "example.invalid/wasmprov/plugins/sdk-go/bindings/wit/types"
)

// Unit tests of the helpers, natively: go test ./ in plugins/sdk-go.

func params(kv ...string) Params {
	var pairs Pairs
	for i := 0; i+1 < len(kv); i += 2 {
		pairs = append(pairs, witTypes.Tuple2[string, string]{F0: kv[i], F1: kv[i+1]})
	}
	return NewParams("demo", pairs)
}

func TestParamsNameTheParameterAndTheFix(t *testing.T) {
	if err := params("hostRoot", "/a").RejectUnknown("hostRoot"); err != nil {
		t.Fatal(err)
	}
	err := params("hostRoot", "/a", "zeta", "1", "hostroot", "/b").RejectUnknown("hostRoot")
	want := `unknown class parameters "hostroot", "zeta": the demo plugin accepts only "hostRoot" (parameter names are case-sensitive)`
	if err == nil || err.Error() != want || kindOf(err) != KindParam {
		t.Fatalf("got %v", err)
	}
	_, err = params("server", "").Required("server", "an address, e.g. 10.0.0.5")
	want = `missing class parameter "server": the demo plugin needs it; set it to an address, e.g. 10.0.0.5`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v", err)
	}
	if _, err := params("archive", "yes").Bool("archive", false); err == nil ||
		err.Error() != `class parameter "archive" is "yes": it must be "true" or "false"` {
		t.Fatalf("got %v", err)
	}
	if v, err := params("mode", "archive").OneOf("mode", []string{"delete", "archive"}, "delete"); v != "archive" || err != nil {
		t.Fatalf("got %v %v", v, err)
	}
	if _, err := params("mode", "keep").OneOf("mode", []string{"delete", "archive"}, "delete"); err == nil ||
		!strings.Contains(err.Error(), `it must be one of "delete", "archive"`) {
		t.Fatalf("got %v", err)
	}
	for _, bad := range []string{"-1", "1.5", "x"} {
		if _, err := params("n", bad).Uint("n", 1); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	if v, err := params("root", "/v/").AbsPath("root", "/d", "a path"); v != "/v" || err != nil {
		t.Fatalf("got %v %v", v, err)
	}
	if v, _ := params().AbsPath("root", "/d", "a path"); v != "/d" {
		t.Fatalf("got %v", v)
	}
	if _, err := params("root", "v/../x").AbsPath("root", "", "a path"); err == nil ||
		!strings.Contains(err.Error(), "it must be an absolute, normalized path") {
		t.Fatalf("got %v", err)
	}
}

func TestPathsStayUnderTheirRoot(t *testing.T) {
	for in, want := range map[string]string{"/srv/x/": "/srv/x", "/": "/", "///": "/"} {
		if got, err := NormalizeAbs(in); got != want || err != nil {
			t.Fatalf("%q: %q %v", in, got, err)
		}
	}
	for _, bad := range []string{"relative", "", "/a/../b", "/a/./b", "/a//b", "/a\nb", "/.."} {
		if _, err := NormalizeAbs(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	if got, _ := Join("/", "pvc-1"); got != "/pvc-1" {
		t.Fatal(got)
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a\x00b", strings.Repeat("x", 256)} {
		if _, err := Join("/volumes", bad); err == nil || !strings.Contains(err.Error(), "is not a single safe file name") {
			t.Fatalf("%q: %v", bad, err)
		}
	}
	for _, bad := range []string{"", "PVC", "-a", "a-", "a/b", "..", strings.Repeat("a", 254)} {
		if CheckPvName(bad) == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	if got := SanitizeComponent("..apps/data:1"); got != "apps-data-1" {
		t.Fatal(got)
	}
}

func TestSourcesAsTheKubernetesAPIWritesThem(t *testing.T) {
	if got := HostPathSource("/srv/x", "Directory"); got != `{"hostPath":{"path":"/srv/x","type":"Directory"}}` {
		t.Fatal(got)
	}
	weird := `/srv/we"ird\dir/pvc-1`
	if got, err := HostPathOf(HostPathSource(weird, "")); got != weird || err != nil {
		t.Fatalf("%q %v", got, err)
	}
	if _, err := HostPathOf(NFSSource("a", "/b", true)); err == nil || !strings.Contains(err.Error(), "no hostPath.path") {
		t.Fatal(err)
	}
}

func TestAnswersBecomeTheirWITVariants(t *testing.T) {
	cases := []struct {
		err  error
		want types.ProvisionError
	}{
		{Reschedule("full"), types.MakeProvisionErrorReschedule("full")},
		{params("x", "1").RejectUnknown(), types.MakeProvisionErrorInvalidArgument(`unknown class parameter "x": the demo plugin accepts only none (parameter names are case-sensitive)`)},
		{Ignored("not mine"), types.MakeProvisionErrorFailed("not mine")},
		{strings.NewReader("").UnreadByte(), types.MakeProvisionErrorFailed("strings.Reader.UnreadByte: at beginning of string")},
	}
	for _, c := range cases {
		if got := provisionError(c.err); got != c.want {
			t.Fatalf("%v: %+v", c.err, got)
		}
	}
	if got := deleteError(Ignored("other node")); got != types.MakeDeleteErrorIgnored("other node") {
		t.Fatalf("%+v", got)
	}
	_, err := params("root", "x").AbsPath("root", "/d", "")
	want := types.MakeDeleteErrorFailed(`the volume's recorded class parameters are unusable: class parameter "root" is "x": it must be an absolute, normalized path: it does not start with /`)
	if got := deleteError(err); got != want {
		t.Fatalf("%+v", got)
	}
}
