//! Invalid objects, sent to both servers: the verdict, the reason, every
//! cause (type, field, message) and the Status message must be the same.
//! Creates, and updates by PUT, merge patch and server-side apply of
//! objects first created valid. A spec-immutability message's unified diff
//! (kube-apiserver appends one) is not modelled: messages are compared up
//! to their first line break. Maps that the real server walks in random
//! order (labels, data keys) hold one entry in each case.

use serde_json::{json, Value};

use super::Target;

const NS: &str = "diff-invalid";
const JSON: &str = "application/json";
const MERGE: &str = "application/merge-patch+json";
const APPLY: &str = "application/apply-patch+yaml";

/// What a client sees of a refusal, messages included.
fn refusal(code: u16, body: &Value) -> Value {
    let first_line = |v: &Value| {
        v.as_str()
            .map(|s| s.lines().next().unwrap_or_default().to_owned())
    };
    if body["kind"] != "Status" {
        return json!({"code": code, "accepted": body["metadata"]["name"]});
    }
    let causes: Vec<Value> = body["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!([c["reason"], c["field"], first_line(&c["message"])]))
        .collect();
    json!({
        "code": code,
        "reason": body["reason"],
        "message": first_line(&body["message"]),
        "details": [body["details"]["kind"], body["details"]["group"], body["details"]["name"]],
        "causes": causes,
    })
}

fn claim(name: &str, spec: Value) -> Value {
    let mut spec_full = json!({"accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}}});
    merge(&mut spec_full, spec);
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": name}, "spec": spec_full})
}

fn volume(name: &str, spec: Value) -> Value {
    let mut spec_full = json!({"accessModes": ["ReadWriteOnce"],
        "capacity": {"storage": "1Gi"}, "hostPath": {"path": "/tmp/diff"}});
    merge(&mut spec_full, spec);
    json!({"apiVersion": "v1", "kind": "PersistentVolume",
           "metadata": {"name": name}, "spec": spec_full})
}

fn class(name: &str, fields: Value) -> Value {
    let mut class = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name}, "provisioner": "example.com/diff"});
    merge(&mut class, fields);
    class
}

/// JSON merge patch semantics (RFC 7386): null removes.
fn merge(target: &mut Value, patch: Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            let map = target.as_object_mut().unwrap();
            for (k, v) in fields {
                if v.is_null() {
                    map.remove(&k);
                } else {
                    merge(map.entry(k).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other,
    }
}

/// Runs the cases on `t`; returns what was seen, case by case.
pub async fn transcript(t: &Target) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    let (code, _) = t.call("POST", "/api/v1/namespaces", JSON, ns).await;
    assert_eq!(code, 201, "{}: create namespace {NS}", t.name);
    let pvcs = format!("/api/v1/namespaces/{NS}/persistentvolumeclaims");
    let pvs = "/api/v1/persistentvolumes".to_owned();
    let classes = "/apis/storage.k8s.io/v1/storageclasses".to_owned();
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases");
    let configmaps = format!("/api/v1/namespaces/{NS}/configmaps");
    let events = format!("/api/v1/namespaces/{NS}/events");
    let events_v1 = format!("/apis/events.k8s.io/v1/namespaces/{NS}/events");
    let nodes = "/api/v1/nodes".to_owned();
    let now = "2026-01-01T00:00:00.000000Z";

    let creates: Vec<(&str, &String, Value)> = vec![
        (
            "claim of 0 bytes",
            &pvcs,
            claim("zero", json!({"resources": {"requests": {"storage": "0"}}})),
        ),
        (
            "claim of -1Gi",
            &pvcs,
            claim(
                "negative",
                json!({"resources": {"requests": {"storage": "-1Gi"}}}),
            ),
        ),
        (
            "claim of abc bytes",
            &pvcs,
            claim(
                "abc",
                json!({"resources": {"requests": {"storage": "abc"}}}),
            ),
        ),
        (
            "claim with volumeMode Weird",
            &pvcs,
            claim("weird-mode", json!({"volumeMode": "Weird"})),
        ),
        (
            "claim with accessModes [ReadWriteSometimes]",
            &pvcs,
            claim("sometimes", json!({"accessModes": ["ReadWriteSometimes"]})),
        ),
        (
            "claim with no access mode and no request",
            &pvcs,
            claim("empty", json!({"accessModes": [], "resources": null})),
        ),
        (
            "claim mixing ReadWriteOncePod",
            &pvcs,
            claim(
                "rwop",
                json!({"accessModes": ["ReadWriteOncePod", "ReadWriteOnce"]}),
            ),
        ),
        (
            "claim of class Fast_SC",
            &pvcs,
            claim("bad-class", json!({"storageClassName": "Fast_SC"})),
        ),
        ("claim named Data_1", &pvcs, claim("Data_1", json!({}))),
        ("claim with label key 'bad key'", &pvcs, {
            let mut c = claim("labelled", json!({}));
            c["metadata"]["labels"] = json!({"bad key": "x"});
            c
        }),
        ("claim with finalizer 'mine'", &pvcs, {
            let mut c = claim("finalized", json!({}));
            c["metadata"]["finalizers"] = json!(["mine"]);
            c
        }),
        (
            "volume at /tmp/../etc",
            &pvs,
            volume("backsteps", json!({"hostPath": {"path": "/tmp/../etc"}})),
        ),
        (
            "volume with reclaim policy Sometimes",
            &pvs,
            volume(
                "sometimes",
                json!({"persistentVolumeReclaimPolicy": "Sometimes"}),
            ),
        ),
        (
            "volume without capacity",
            &pvs,
            volume("no-capacity", json!({"capacity": null})),
        ),
        (
            "volume of 0 bytes",
            &pvs,
            volume("zero", json!({"capacity": {"storage": "0"}})),
        ),
        (
            "volume with two sources",
            &pvs,
            volume(
                "two-sources",
                json!({"nfs": {"server": "nfs.example", "path": "/x"}}),
            ),
        ),
        (
            "local volume without node affinity",
            &pvs,
            volume(
                "local",
                json!({"hostPath": null, "local": {"path": "/mnt/disk"}}),
            ),
        ),
        (
            "volume without a source",
            &pvs,
            volume("no-source", json!({"hostPath": null})),
        ),
        (
            "volume with hostPath type Dir",
            &pvs,
            volume(
                "dir-type",
                json!({"hostPath": {"path": "/x", "type": "Dir"}}),
            ),
        ),
        (
            "class with reclaimPolicy Recycle",
            &classes,
            class("recycle", json!({"reclaimPolicy": "Recycle"})),
        ),
        (
            "class with volumeBindingMode Later",
            &classes,
            class("later", json!({"volumeBindingMode": "Later"})),
        ),
        (
            "class with provisioner 'bad provisioner!'",
            &classes,
            class(
                "bad-provisioner",
                json!({"provisioner": "bad provisioner!"}),
            ),
        ),
        (
            "class with provisioner a/b/c",
            &classes,
            class("slashes", json!({"provisioner": "a/b/c"})),
        ),
        (
            "class without provisioner, reclaimPolicy Recycle",
            &classes,
            class(
                "no-provisioner",
                json!({"provisioner": null, "reclaimPolicy": "Recycle"}),
            ),
        ),
        (
            "lease of -5 s",
            &leases,
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "negative"}, "spec": {"leaseDurationSeconds": -5}}),
        ),
        (
            "lease with -1 transitions",
            &leases,
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "transitions"}, "spec": {"leaseTransitions": -1}}),
        ),
        (
            "config map with key 'bad key'",
            &configmaps,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "bad-key"}, "data": {"bad key": "x"}}),
        ),
        (
            "config map with key ..x",
            &configmaps,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "dots"}, "data": {"..x": "x"}}),
        ),
        (
            "config map of 1 MiB and a byte",
            &configmaps,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "too-big"}, "data": {"a": "x".repeat(1024 * 1024 + 1)}}),
        ),
        (
            "core event about another namespace",
            &events,
            json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "elsewhere"}, "involvedObject": {"kind": "Pod", "name": "p", "namespace": "other"},
            "reason": "R", "message": "m"}),
        ),
        (
            "events.k8s.io event with nothing",
            &events_v1,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "nothing"}}),
        ),
        (
            "events.k8s.io event without reporter",
            &events_v1,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "no-reporter"}, "eventTime": now, "type": "Weird",
            "regarding": {"kind": "Pod", "name": "p", "namespace": NS}}),
        ),
        (
            "node with taint effect NoRun",
            &nodes,
            json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "diff-taint"}, "spec": {"taints": [{"key": "k", "effect": "NoRun"}]}}),
        ),
        (
            "node with podCIDR 10.0.0/24",
            &nodes,
            json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "diff-cidr"}, "spec": {"podCIDR": "10.0.0/24"}}),
        ),
    ];
    for (what, path, body) in creates {
        let (code, answer) = t.call("POST", path, JSON, body).await;
        out.push((format!("create: {what}"), refusal(code, &answer)));
    }

    // Objects made valid, then changed in ways the real server refuses.
    let valid: Vec<(&String, Value)> = vec![
        (&pvcs, claim("pending", json!({}))),
        (&pvs, volume("fixed", json!({}))),
        (&classes, class("fixed", json!({"parameters": {"a": "1"}}))),
        (
            &configmaps,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "frozen"}, "immutable": true, "data": {"a": "1"}}),
        ),
        (
            &leases,
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "held"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
        ),
        (
            &nodes,
            json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "diff-node"}, "spec": {"podCIDR": "10.0.0.0/24", "providerID": "diff://1"}}),
        ),
    ];
    for (path, body) in valid {
        let name = body["metadata"]["name"].as_str().unwrap().to_owned();
        let (code, answer) = t.call("POST", path, JSON, body).await;
        assert_eq!(code, 201, "{}: create {path}/{name}: {answer}", t.name);
    }
    let apply = |path: &str| format!("{path}?fieldManager=diff&force=true");
    let updates: Vec<(&str, &str, String, Value)> = vec![
        (
            "merge: a pending claim's access modes",
            MERGE,
            format!("{pvcs}/pending"),
            json!({"spec": {"accessModes": ["ReadWriteMany"]}}),
        ),
        (
            "merge: a pending claim's size",
            MERGE,
            format!("{pvcs}/pending"),
            json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}}),
        ),
        (
            "merge: a claim's volumeMode",
            MERGE,
            format!("{pvcs}/pending"),
            json!({"spec": {"volumeMode": "Block"}}),
        ),
        (
            "merge: a volume's hostPath",
            MERGE,
            format!("{pvs}/fixed"),
            json!({"spec": {"hostPath": {"path": "/tmp/elsewhere"}}}),
        ),
        (
            "merge: a volume's reclaim policy to Sometimes",
            MERGE,
            format!("{pvs}/fixed"),
            json!({"spec": {"persistentVolumeReclaimPolicy": "Sometimes"}}),
        ),
        (
            "merge: a class's parameters",
            MERGE,
            format!("{classes}/fixed"),
            json!({"parameters": {"a": "2"}}),
        ),
        (
            "apply: a class's provisioner and binding mode",
            APPLY,
            apply(&format!("{classes}/fixed")),
            class(
                "fixed",
                json!({"provisioner": "example.com/other", "volumeBindingMode": "WaitForFirstConsumer", "parameters": {"a": "1"}}),
            ),
        ),
        (
            "merge: an immutable config map's data",
            MERGE,
            format!("{configmaps}/frozen"),
            json!({"data": {"a": "2"}}),
        ),
        (
            "merge: an immutable config map made mutable",
            MERGE,
            format!("{configmaps}/frozen"),
            json!({"immutable": false}),
        ),
        (
            "apply: a lease of -1 s",
            APPLY,
            apply(&format!("{leases}/held")),
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "held"}, "spec": {"leaseDurationSeconds": -1}}),
        ),
        (
            "merge: a node's podCIDR",
            MERGE,
            format!("{nodes}/diff-node"),
            json!({"spec": {"podCIDR": "10.0.1.0/24", "podCIDRs": ["10.0.1.0/24"]}}),
        ),
        (
            "merge: a node's providerID",
            MERGE,
            format!("{nodes}/diff-node"),
            json!({"spec": {"providerID": "diff://2"}}),
        ),
    ];
    for (what, content_type, path, body) in updates {
        let (code, answer) = t.call("PATCH", &path, content_type, body).await;
        out.push((format!("update: {what}"), refusal(code, &answer)));
    }
    // A PUT with the current object and one field changed.
    let (_, mut current) = t.get(&format!("{pvcs}/pending")).await;
    current["spec"]["selector"] = json!({"matchLabels": {"tier": "gold"}});
    let (code, answer) = t
        .call("PUT", &format!("{pvcs}/pending"), JSON, current)
        .await;
    out.push((
        "update: put a claim's selector".into(),
        refusal(code, &answer),
    ));
    out
}
