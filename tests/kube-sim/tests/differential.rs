//! The simulator against the real thing: one sequence of requests, sent to
//! the simulator and to a real control plane (tests/cluster: kube-apiserver
//! with the PV binder and protection controllers), and what a client sees
//! compared: status codes, Status reasons and causes, defaults, finalizers,
//! the PV binder's annotations and phases, and the order of watch events.
//!
//! What the simulator does not model is listed in its README ("Not
//! modelled"); this test keeps the rest honest.

#[path = "differential/invalid.rs"]
mod invalid;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use http_body_util::BodyExt;
use serde_json::{json, Value};

const NS: &str = "diff";
const PROVISIONER: &str = "example.com/diff";

/// One server under test.
struct Target {
    name: &'static str,
    client: kube::Client,
}

impl Target {
    /// Sends a request; returns the status code and the body as JSON.
    async fn call(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Value,
    ) -> (u16, Value) {
        let bytes = if body.is_null() {
            Vec::new()
        } else {
            serde_json::to_vec(&body).unwrap()
        };
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", content_type)
            .header("accept", "application/json")
            .body(kube::client::Body::from(bytes))
            .unwrap();
        let response = self
            .client
            .send(request)
            .await
            .unwrap_or_else(|e| panic!("{}: {method} {path}: {e}", self.name));
        let code = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        (code, value)
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, "application/json", Value::Null)
            .await
    }

    /// Polls `path` until `ready` holds of the object (at most 60 s).
    async fn wait(&self, what: &str, path: &str, ready: impl Fn(u16, &Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (code, body) = self.get(path).await;
            if ready(code, &body) {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "{}: timed out waiting until {what}; last answer {code}: {body}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts a watch of the claims of `NS` from `resource_version`;
    /// returns where its events are collected.
    async fn watch_claims(&self, resource_version: &str) -> Arc<Mutex<Vec<Value>>> {
        let path = format!(
            "/api/v1/namespaces/{NS}/persistentvolumeclaims?watch=1&resourceVersion={resource_version}&timeoutSeconds=120"
        );
        let request = http::Request::get(path)
            .body(kube::client::Body::from(Vec::new()))
            .unwrap();
        let response = self.client.send(request).await.unwrap();
        assert_eq!(response.status(), 200, "{}: the watch starts", self.name);
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = events.clone();
        tokio::spawn(async move {
            let mut stream = response.into_body().into_data_stream();
            let mut buffer = Vec::new();
            while let Some(Ok(chunk)) = stream.next().await {
                buffer.extend_from_slice(&chunk);
                while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = buffer.drain(..=end).collect();
                    if let Ok(event) = serde_json::from_slice::<Value>(&line) {
                        sink.lock().unwrap().push(event);
                    }
                }
            }
        });
        events
    }
}

/// What a client sees of an answer: the code, and for a Status its reason
/// and the fields its causes name; for an object, what `pick` selects.
fn seen(code: u16, body: &Value, pick: &[&str]) -> Value {
    if body["kind"] == "Status" {
        let causes: Vec<Value> = body["details"]["causes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| json!([c["reason"], c["field"]]))
            .collect();
        return json!({
            "code": code, "reason": body["reason"], "causes": causes,
            "object": [body["details"]["kind"], body["details"]["name"]],
        });
    }
    let mut out = json!({"code": code});
    for pointer in pick {
        out[*pointer] = body.pointer(pointer).cloned().unwrap_or(Value::Null);
    }
    out
}

/// The annotation keys of an object, sorted.
fn annotation_keys(o: &Value) -> Vec<String> {
    let mut keys: Vec<String> = o["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k.clone())
        .collect();
    keys.sort();
    keys
}

/// A watch event as a client acting on it sees it.
fn event_summary(e: &Value) -> Value {
    let o = &e["object"];
    json!({
        "type": e["type"],
        "phase": o["status"]["phase"],
        "volumeName": o["spec"]["volumeName"].is_string(),
        "annotations": annotation_keys(o),
        "finalizers": o["metadata"]["finalizers"],
        "deleting": o["metadata"]["deletionTimestamp"].is_string(),
    })
}

/// Runs the sequence on `t`; returns what was seen, step by step.
async fn transcript(t: &Target) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    let mut record = |step: &str, v: Value| out.push((step.to_owned(), v));
    let pvcs = format!("/api/v1/namespaces/{NS}/persistentvolumeclaims");
    let json_ct = "application/json";

    let (code, ns) = t
        .call(
            "POST",
            "/api/v1/namespaces",
            json_ct,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
        )
        .await;
    record("create namespace", seen(code, &ns, &["/status/phase"]));
    let start_rv = ns["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned();
    let watch = t.watch_claims(&start_rv).await;

    let (code, body) = t.get(&format!("{pvcs}/nope")).await;
    record("get a missing claim", seen(code, &body, &[]));

    let (code, body) = t
        .call(
            "POST",
            "/apis/storage.k8s.io/v1/storageclasses",
            json_ct,
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                   "metadata": {"name": "diff-sc"}, "provisioner": PROVISIONER}),
        )
        .await;
    record(
        "create a class",
        seen(code, &body, &["/reclaimPolicy", "/volumeBindingMode"]),
    );

    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {"storageClassName": "diff-sc", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}});
    let (code, created) = t.call("POST", &pvcs, json_ct, claim.clone()).await;
    record(
        "create a claim",
        seen(
            code,
            &created,
            &[
                "/metadata/finalizers",
                "/status/phase",
                "/spec/volumeMode",
                "/metadata/generation",
            ],
        ),
    );
    let uid = created["metadata"]["uid"].as_str().unwrap().to_owned();

    let (code, body) = t.call("POST", &pvcs, json_ct, claim.clone()).await;
    record("create it again", seen(code, &body, &[]));

    let (code, body) = t
        .call(
            "POST",
            &pvcs,
            json_ct,
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                   "metadata": {"name": "bad"}, "spec": {"storageClassName": "diff-sc"}}),
        )
        .await;
    record(
        "create a claim without access modes or size",
        seen(code, &body, &[]),
    );

    let mut stale = created.clone();
    stale["metadata"]["resourceVersion"] = json!("1");
    stale["metadata"]["labels"] = json!({"stale": "yes"});
    let (code, body) = t.call("PUT", &format!("{pvcs}/data"), json_ct, stale).await;
    record(
        "update from a stale resourceVersion",
        seen(code, &body, &[]),
    );

    let (code, body) = t
        .call(
            "PATCH",
            &format!("{pvcs}/data"),
            "application/merge-patch+json",
            json!({"metadata": {"annotations": {"example.com/note": "x"}}}),
        )
        .await;
    record(
        "merge-patch an annotation",
        seen(code, &body, &["/metadata/annotations/example.com~1note"]),
    );

    let (code, body) = t
        .call(
            "PATCH",
            &format!("{pvcs}/data"),
            "application/json-patch+json",
            json!([{"op": "test", "path": "/metadata/finalizers", "value": ["other"]},
                   {"op": "replace", "path": "/metadata/finalizers", "value": []}]),
        )
        .await;
    record("JSON patch whose test fails", seen(code, &body, &[]));

    let (code, body) = t
        .call(
            "PATCH",
            &format!("{pvcs}/data"),
            "application/merge-patch+json",
            json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "other"}}),
        )
        .await;
    record("change an immutable field", seen(code, &body, &[]));

    let apply = |value: &str| {
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "data", "labels": {"owner": value}}})
    };
    let (code, body) = t
        .call(
            "PATCH",
            &format!("{pvcs}/data?fieldManager=first"),
            "application/apply-patch+yaml",
            apply("first"),
        )
        .await;
    record(
        "apply a label",
        seen(code, &body, &["/metadata/labels/owner"]),
    );
    let (code, body) = t
        .call(
            "PATCH",
            &format!("{pvcs}/data?fieldManager=second"),
            "application/apply-patch+yaml",
            apply("second"),
        )
        .await;
    record("apply it from another manager", seen(code, &body, &[]));
    let (code, body) = t
        .call(
            "PATCH",
            &format!("{pvcs}/data?fieldManager=second&force=true"),
            "application/apply-patch+yaml",
            apply("second"),
        )
        .await;
    record(
        "apply it with force",
        seen(code, &body, &["/metadata/labels/owner"]),
    );

    // The PV binder annotates a pending claim of an external provisioner.
    let annotated = t
        .wait(
            "the binder names the provisioner on the claim",
            &format!("{pvcs}/data"),
            |_, c| {
                c["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"]
                    == PROVISIONER
            },
        )
        .await;
    record(
        "the binder's annotations",
        json!({"annotations": annotation_keys(&annotated), "phase": annotated["status"]["phase"]}),
    );

    // What a provisioner saves; the binder binds both.
    let pv_name = format!("pvc-{uid}");
    let (code, body) = t
        .call(
            "POST",
            "/api/v1/persistentvolumes",
            json_ct,
            json!({"apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": pv_name, "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
                "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                         "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "diff-sc",
                         "hostPath": {"path": "/tmp/diff"},
                         "claimRef": {"namespace": NS, "name": "data", "uid": uid}}}),
        )
        .await;
    record(
        "save a provisioned volume",
        seen(
            code,
            &body,
            &["/metadata/finalizers", "/status/phase", "/spec/volumeMode"],
        ),
    );
    let bound = t
        .wait("the claim is Bound", &format!("{pvcs}/data"), |_, c| {
            c["status"]["phase"] == "Bound"
        })
        .await;
    record(
        "the bound claim",
        json!({"annotations": annotation_keys(&bound),
               "volumeName": bound["spec"]["volumeName"] == json!(pv_name),
               "capacity": bound["status"]["capacity"], "accessModes": bound["status"]["accessModes"]}),
    );
    let pv_path = format!("/api/v1/persistentvolumes/{pv_name}");
    let pv = t
        .wait("the volume is Bound", &pv_path, |_, v| {
            v["status"]["phase"] == "Bound"
        })
        .await;
    record(
        "the bound volume",
        json!({"annotations": annotation_keys(&pv), "claimRef": pv["spec"]["claimRef"]["name"]}),
    );

    let (code, body) = t
        .call(
            "DELETE",
            "/apis/storage.k8s.io/v1/storageclasses/diff-sc",
            json_ct,
            json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-its-uid"}}),
        )
        .await;
    record(
        "delete with a wrong uid precondition",
        seen(code, &body, &[]),
    );

    // Deleting the claim: held by pvc-protection until no pod uses it, then
    // gone; its volume is Released for its provisioner to reclaim.
    let (code, body) = t
        .call("DELETE", &format!("{pvcs}/data"), json_ct, Value::Null)
        .await;
    record(
        "delete the claim",
        seen(code, &body, &["/kind", "/metadata/finalizers"]),
    );
    t.wait("the claim is gone", &format!("{pvcs}/data"), |code, _| {
        code == 404
    })
    .await;
    let released = t
        .wait("the volume is Released", &pv_path, |_, v| {
            v["status"]["phase"] == "Released"
        })
        .await;
    record(
        "the released volume",
        json!({"annotations": annotation_keys(&released), "claimRef": released["spec"]["claimRef"]["name"],
               "finalizers": released["metadata"]["finalizers"]}),
    );
    let (code, body) = t.call("DELETE", &pv_path, json_ct, Value::Null).await;
    record("delete the volume", seen(code, &body, &["/kind"]));
    t.wait("the volume is gone", &pv_path, |code, _| code == 404)
        .await;

    // The claim's history as a watch saw it; consecutive events that look
    // the same to a client are one (how many writes a controller makes for
    // one change is its business).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let done = watch.lock().unwrap().iter().any(|e| e["type"] == "DELETED");
        if done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}: no DELETED event for the claim",
            t.name
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut history: Vec<Value> = Vec::new();
    for e in watch.lock().unwrap().iter() {
        let summary = event_summary(e);
        if history.last() != Some(&summary) {
            history.push(summary);
        }
    }
    for (i, e) in history.into_iter().enumerate() {
        record(&format!("watch event {i}"), e);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_answers_like_the_real_api_server() {
    let real_cluster =
        tokio::task::spawn_blocking(|| test_cluster::Cluster::start(Default::default()))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("starting a real test cluster: {e}"));
    let sim = kube_sim::Simulator::start(kube_sim::Config::default())
        .await
        .unwrap();
    let real = Target {
        name: "real",
        client: real_cluster.client().await.unwrap(),
    };
    let simulated = Target {
        name: "simulated",
        client: sim.client().unwrap(),
    };
    let (want, got) = tokio::join!(transcript(&real), transcript(&simulated));
    let mut found = differences(&want, &got);
    let (want, got) = tokio::join!(invalid::transcript(&real), invalid::transcript(&simulated));
    found.extend(differences(&want, &got));
    assert!(
        found.is_empty(),
        "the simulator differs from the real API server:\n{}",
        found.join("\n")
    );
}

/// The steps where two transcripts differ, each shown both ways.
fn differences(want: &[(String, Value)], got: &[(String, Value)]) -> Vec<String> {
    let mut differences = Vec::new();
    for i in 0..want.len().max(got.len()) {
        match (want.get(i), got.get(i)) {
            (Some((step, w)), Some((_, g))) if w == g => {
                eprintln!("same: {step}: {w}");
            }
            (w, g) => differences.push(format!(
                "step {i}:\n  real:      {}\n  simulated: {}",
                w.map_or("(none)".into(), |(s, v)| format!("{s}: {v}")),
                g.map_or("(none)".into(), |(s, v)| format!("{s}: {v}")),
            )),
        }
    }
    differences
}
