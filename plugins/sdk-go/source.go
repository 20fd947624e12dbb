package plugin

import (
	"encoding/json"
	"fmt"
)

// PersistentVolumeSource JSON, as Volume.Source carries it.

func sourceJSON(kind string, fields map[string]any) string {
	out, err := json.Marshal(map[string]any{kind: fields})
	if err != nil {
		panic(err) // strings and booleans always marshal
	}
	return string(out)
}

// HostPathSource is {"hostPath":{"path":…,"type":…}}; kind is e.g.
// "Directory" ("" leaves the type out).
func HostPathSource(path, kind string) string {
	fields := map[string]any{"path": path}
	if kind != "" {
		fields["type"] = kind
	}
	return sourceJSON("hostPath", fields)
}

// NFSSource is {"nfs":{"server":…,"path":…}}, with readOnly when true.
func NFSSource(server, path string, readOnly bool) string {
	fields := map[string]any{"server": server, "path": path}
	if readOnly {
		fields["readOnly"] = true
	}
	return sourceJSON("nfs", fields)
}

// LocalSource is {"local":{"path":…}}, with fsType when not "". A local
// volume needs node affinity (see PinToNode).
func LocalSource(path, fsType string) string {
	fields := map[string]any{"path": path}
	if fsType != "" {
		fields["fsType"] = fsType
	}
	return sourceJSON("local", fields)
}

// SourceField is the string field of the kind source in source JSON, e.g.
// SourceField(source, "nfs", "path").
func SourceField(source, kind, field string) (string, error) {
	var value map[string]map[string]any
	if err := json.Unmarshal([]byte(source), &value); err != nil {
		return "", fmt.Errorf("the source is not JSON (%v)", err)
	}
	found, ok := value[kind][field].(string)
	if !ok {
		return "", fmt.Errorf("the source has no %s.%s", kind, field)
	}
	return found, nil
}

// HostPathOf is the hostPath.path of a source.
func HostPathOf(source string) (string, error) { return SourceField(source, "hostPath", "path") }
