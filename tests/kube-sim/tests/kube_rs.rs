//! Conformance of the simulator as seen by kube-rs (`Api`, `watcher`, `reflector`).

mod common;

use std::time::Duration;

use common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{
    ConfigMap, Event, Namespace, PersistentVolume, PersistentVolumeClaim, Pod,
};
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Api, ResourceExt};
use serde_json::{json, Value};

fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"}
    }))
    .expect("valid configmap")
}

#[tokio::test]
async fn pvc_crud_defaults_and_conflicts() {
    let sim = start().await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(sim.client().unwrap(), "default");

    let created = pvcs
        .create(&PostParams::default(), &pvc("data", Some("none"), "1Gi"))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    let rv: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();
    assert_eq!(
        created.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    assert_eq!(
        created.spec.as_ref().and_then(|s| s.volume_mode.as_deref()),
        Some("Filesystem")
    );
    assert_eq!(
        meta.finalizers.as_deref(),
        Some(&["kubernetes.io/pvc-protection".to_string()][..])
    );

    // Same name again: 409 AlreadyExists.
    let err = status_of(
        pvcs.create(&PostParams::default(), &pvc("data", None, "1Gi"))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));

    // Update with the current resourceVersion bumps it; a stale one conflicts.
    let mut fresh = created.clone();
    fresh.labels_mut().insert("app".into(), "db".into());
    let updated = pvcs
        .replace("data", &PostParams::default(), &fresh)
        .await
        .unwrap();
    let rv2: u64 = updated.resource_version().unwrap().parse().unwrap();
    assert!(rv2 > rv);
    let err = status_of(
        pvcs.replace("data", &PostParams::default(), &fresh)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert!(
        err.message.contains("the object has been modified"),
        "{}",
        err.message
    );

    // PVC spec is immutable except requests.
    let mut bad = updated.clone();
    bad.spec.as_mut().unwrap().access_modes = Some(vec!["ReadWriteMany".into()]);
    let err = status_of(
        pvcs.replace("data", &PostParams::default(), &bad)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));

    // A missing object is a 404 Status.
    let err = status_of(pvcs.get("nope").await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    assert_eq!(err.message, "persistentvolumeclaims \"nope\" not found");
}

#[tokio::test]
async fn generate_name_and_validation() {
    let sim = start().await;
    let client = sim.client().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut obj = cm("", json!({}));
    obj.metadata.name = None;
    obj.metadata.generate_name = Some("gen-".into());
    let a = cms.create(&PostParams::default(), &obj).await.unwrap();
    let b = cms.create(&PostParams::default(), &obj).await.unwrap();
    let (an, bn) = (a.name_any(), b.name_any());
    assert!(an.starts_with("gen-") && an.len() == 9, "{an}");
    assert_ne!(an, bn);
    assert!(an[4..]
        .chars()
        .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));

    // No name at all: 422.
    obj.metadata.generate_name = None;
    let err = status_of(cms.create(&PostParams::default(), &obj).await.unwrap_err());
    assert_eq!(err.code, 422);

    // Namespace must exist.
    let other: Api<ConfigMap> = Api::namespaced(client.clone(), "missing");
    let err = status_of(
        other
            .create(&PostParams::default(), &cm("x", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.message.as_str()),
        (404, "namespaces \"missing\" not found")
    );

    // Strict field validation rejects unknown fields; the default drops them with a warning.
    let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "strict"}, "bogus": 1})).unwrap();
    let req = http::Request::post("/api/v1/namespaces/default/configmaps?fieldValidation=Strict")
        .header("content-type", "application/json")
        .body(body.clone())
        .unwrap();
    let err = status_of(client.request::<Value>(req).await.unwrap_err());
    assert_eq!(err.code, 400);
    assert!(
        err.message.contains("unknown field \"bogus\""),
        "{}",
        err.message
    );
    let req = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let created: Value = client.request(req).await.unwrap();
    assert!(created.get("bogus").is_none());
}

#[tokio::test]
async fn refuses_non_loopback_addresses() {
    let config = kube_sim::Config {
        bind: "0.0.0.0:0".parse().unwrap(),
        ..kube_sim::Config::default()
    };
    let err = kube_sim::Simulator::start(config)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("loopback"), "{err}");
}

#[tokio::test]
async fn unknown_path_is_a_404_status() {
    let sim = start().await;
    let client = sim.client().unwrap();
    for path in [
        "/api/v1/widgets",
        "/apis/example.com/v1/things",
        "/nothing/here",
    ] {
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        let err = status_of(client.request::<Value>(req).await.unwrap_err());
        assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"), "{path}");
    }
}

#[tokio::test]
async fn status_subresource_splits_spec_and_status() {
    // Without the PV controller, which would otherwise fix the phase up.
    let controllers = kube_sim::ControllerConfig {
        pv_binder: false,
        ..kube_sim::ControllerConfig::default()
    };
    let sim = start_with(kube_sim::Config {
        controllers,
        ..kube_sim::Config::default()
    })
    .await;
    let pvs: Api<PersistentVolume> = Api::all(sim.client().unwrap());
    let mut v = pv("pv-status", "manual", "1Gi");
    v.spec.as_mut().unwrap().persistent_volume_reclaim_policy = None;
    let created = pvs.create(&PostParams::default(), &v).await.unwrap();
    assert_eq!(
        created
            .spec
            .as_ref()
            .unwrap()
            .persistent_volume_reclaim_policy
            .as_deref(),
        Some("Retain")
    );

    // Status write ignores spec changes.
    let patch = json!({"spec": {"storageClassName": "changed"}, "status": {"phase": "Failed", "message": "x"}});
    let after = pvs
        .patch_status("pv-status", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        after.status.as_ref().unwrap().phase.as_deref(),
        Some("Failed")
    );
    assert_eq!(
        after.spec.as_ref().unwrap().storage_class_name.as_deref(),
        Some("manual")
    );

    // Main-resource write ignores status changes.
    let patch = json!({"spec": {"storageClassName": "other"}, "status": {"phase": "Available"}});
    let after = pvs
        .patch("pv-status", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        after.spec.as_ref().unwrap().storage_class_name.as_deref(),
        Some("other")
    );
    assert_eq!(
        after.status.as_ref().unwrap().phase.as_deref(),
        Some("Failed")
    );
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let sim = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let mut obj = cm("held", json!({}));
    obj.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &obj).await.unwrap();

    // Precondition mismatch: 409.
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("wrong".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    assert_eq!(
        status_of(cms.delete("held", &dp).await.unwrap_err()).code,
        409
    );

    let deleted = cms.delete("held", &DeleteParams::default()).await.unwrap();
    let obj = deleted
        .left()
        .expect("object returned while finalizers are pending");
    assert!(obj.metadata.deletion_timestamp.is_some());
    assert_eq!(obj.metadata.deletion_grace_period_seconds, Some(0));

    // No new finalizers on a deleting object.
    let add = Patch::<Value>::Json(
        serde_json::from_value(
            json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "x/y"}]),
        )
        .unwrap(),
    );
    assert_eq!(
        status_of(
            cms.patch("held", &PatchParams::default(), &add)
                .await
                .unwrap_err()
        )
        .code,
        422
    );

    // kube-runtime's finalizer helper style: JSON patch with `test`; a failed test is 422.
    let wrong = Patch::<Value>::Json(
        serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "other"},
            {"op": "remove", "path": "/metadata/finalizers/0"}
        ]))
        .unwrap(),
    );
    assert_eq!(
        status_of(
            cms.patch("held", &PatchParams::default(), &wrong)
                .await
                .unwrap_err()
        )
        .code,
        422
    );
    let right = Patch::<Value>::Json(
        serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "example.com/hold"},
            {"op": "remove", "path": "/metadata/finalizers/0"}
        ]))
        .unwrap(),
    );
    cms.patch("held", &PatchParams::default(), &right)
        .await
        .unwrap();
    assert!(
        cms.get_opt("held").await.unwrap().is_none(),
        "object goes with its last finalizer"
    );
}

#[tokio::test]
async fn selectors_and_consistent_pagination() {
    let sim = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    for i in 0..5 {
        let tier = if i % 2 == 0 { "even" } else { "odd" };
        cms.create(
            &PostParams::default(),
            &cm(&format!("cm-{i}"), json!({"tier": tier})),
        )
        .await
        .unwrap();
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier=odd"))
                .await
                .unwrap()
        ),
        ["cm-1", "cm-3"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().labels("tier in (even),tier!=odd"))
                .await
                .unwrap()
        )
        .len(),
        3
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name=cm-2"))
                .await
                .unwrap()
        ),
        ["cm-2"]
    );
    let err = status_of(
        cms.list(&ListParams::default().fields("data.k=v"))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 400);

    // Pages are a consistent snapshot: objects created between pages do not appear.
    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(first.clone()), ["cm-0", "cm-1"]);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    cms.create(&PostParams::default(), &cm("cm-9", json!({})))
        .await
        .unwrap();
    cms.delete("cm-4", &DeleteParams::default()).await.unwrap();
    let token = first.metadata.continue_.clone().unwrap();
    let second = cms
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(second.clone()), ["cm-2", "cm-3", "cm-4"]);
    assert!(second.metadata.continue_.is_none());
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version() {
    let sim = start_with(kube_sim::Config {
        bookmark_interval: Duration::from_millis(200),
        ..kube_sim::Config::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let a = cms
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &cm("b", json!({})))
        .await
        .unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    cms.delete("b", &DeleteParams::default()).await.unwrap();

    let wp = WatchParams {
        bookmarks: true,
        ..WatchParams::default().timeout(10)
    };
    let mut stream = cms
        .watch(&wp, a.resource_version().as_deref().unwrap())
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    let mut bookmark = None;
    while bookmark.is_none() {
        let ev = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("event in time")
            .unwrap()
            .unwrap();
        match ev {
            WatchEvent::Added(o) => seen.push(format!("ADDED {}", o.name_any())),
            WatchEvent::Modified(o) => seen.push(format!("MODIFIED {}", o.name_any())),
            WatchEvent::Deleted(o) => seen.push(format!("DELETED {}", o.name_any())),
            WatchEvent::Bookmark(b) => bookmark = Some(b.metadata.resource_version),
            WatchEvent::Error(e) => panic!("unexpected error event {e:?}"),
        }
    }
    assert_eq!(seen, ["ADDED b", "MODIFIED a", "DELETED b"]);
    let list = cms.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        bookmark, list.metadata.resource_version,
        "bookmark carries the latest revision"
    );
}

#[tokio::test]
async fn too_old_resource_version_is_an_in_stream_410_and_watcher_relists() {
    let sim = start_with(kube_sim::Config {
        history_window: 5,
        ..kube_sim::Config::default()
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let first = cms
        .create(&PostParams::default(), &cm("first", json!({})))
        .await
        .unwrap();
    for i in 0..10 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), json!({})))
            .await
            .unwrap();
    }
    let mut stream = cms
        .watch(
            &WatchParams::default(),
            first.resource_version().as_deref().unwrap(),
        )
        .await
        .unwrap()
        .boxed();
    match stream.next().await {
        Some(Ok(WatchEvent::Error(status))) => {
            assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
            assert!(
                status.message.starts_with("too old resource version"),
                "{}",
                status.message
            );
        }
        other => panic!("expected an in-stream 410, got {other:?}"),
    }

    // A reflector survives compaction: its watch is cut, the re-watch gets 410,
    // it re-lists and ends up with the full, current state.
    let (reader, writer) = reflector::store::<ConfigMap>();
    let rf = reflector(writer, watcher(cms.clone(), watcher::Config::default()));
    let task = tokio::spawn(rf.applied_objects().for_each(|_| async {}));
    reader.wait_until_ready().await.unwrap();
    sim.faults().compact_history();
    for i in 0..10 {
        cms.create(&PostParams::default(), &cm(&format!("late-{i}"), json!({})))
            .await
            .unwrap();
    }
    sim.faults().compact_history();
    sim.faults().drop_watches();
    cms.create(&PostParams::default(), &cm("after", json!({})))
        .await
        .unwrap();
    eventually("reflector has every configmap after re-list", || {
        let n = reader.state().len();
        async move { (n == 22).then_some(()) }
    })
    .await;
    task.abort();
}

#[tokio::test]
async fn streaming_list_watcher_sees_initial_events_end() {
    let sim = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    for i in 0..3 {
        cms.create(&PostParams::default(), &cm(&format!("s{i}"), json!({})))
            .await
            .unwrap();
    }
    let mut stream = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut init = Vec::new();
    loop {
        let ev = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
            .await
            .expect("in time")
            .unwrap()
            .unwrap();
        match ev {
            watcher::Event::Init => {}
            watcher::Event::InitApply(o) => init.push(o.name_any()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(init, ["s0", "s1", "s2"]);
    cms.create(&PostParams::default(), &cm("s3", json!({})))
        .await
        .unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(matches!(ev, watcher::Event::Apply(o) if o.name_any() == "s3"));

    // Without NotOlderThan the real server refuses a streaming list with 422.
    let client = sim.client().unwrap();
    let req = http::Request::get("/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&allowWatchBookmarks=true")
        .body(Vec::new())
        .unwrap();
    assert_eq!(
        status_of(client.request::<Value>(req).await.unwrap_err()).code,
        422
    );
}

#[tokio::test]
async fn patch_flavours_and_server_side_apply() {
    let sim = start().await;
    let client = sim.client().unwrap();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let mut claim = pvc("p", Some("x"), "1Gi");
    claim.metadata.finalizers = Some(vec!["a/b".into()]);
    pvcs.create(&PostParams::default(), &claim).await.unwrap();

    // Strategic merge: finalizers are a set (merge patch would replace the list).
    let smp = json!({"metadata": {"finalizers": ["c/d"]}});
    let after = pvcs
        .patch("p", &PatchParams::default(), &Patch::Strategic(&smp))
        .await
        .unwrap();
    assert_eq!(
        after.finalizers(),
        ["a/b", "kubernetes.io/pvc-protection", "c/d"]
    );
    let after = pvcs
        .patch("p", &PatchParams::default(), &Patch::Merge(&smp))
        .await
        .unwrap();
    assert_eq!(after.finalizers(), ["c/d"]);
    // A resourceVersion in a patch is a precondition.
    let stale = json!({"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}});
    assert_eq!(
        status_of(
            pvcs.patch("p", &PatchParams::default(), &Patch::Merge(&stale))
                .await
                .unwrap_err()
        )
        .code,
        409
    );

    // Server-side apply creates, then conflicts with another manager unless forced.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "1", "b": "2"}});
    let created = cms
        .patch("ssa", &PatchParams::apply("alice"), &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(created.data.as_ref().unwrap().len(), 2);
    assert!(created
        .metadata
        .managed_fields
        .as_ref()
        .is_some_and(|m| m[0].manager.as_deref() == Some("alice")));
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": "9"}});
    let err = status_of(
        cms.patch("ssa", &PatchParams::apply("bob"), &Patch::Apply(&theirs))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert!(err.message.contains("alice"), "{}", err.message);
    let forced = cms
        .patch(
            "ssa",
            &PatchParams::apply("bob").force(),
            &Patch::Apply(&theirs),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.as_ref().unwrap()["a"], "9");
    // Alice stops applying `b`: it is removed.
    let less =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {}});
    let pruned = cms
        .patch("ssa", &PatchParams::apply("alice"), &Patch::Apply(&less))
        .await
        .unwrap();
    assert_eq!(
        pruned.data.unwrap_or_default().keys().collect::<Vec<_>>(),
        ["a"]
    );
}

#[tokio::test]
async fn binder_flow_end_to_end() {
    let sim = start().await;
    let client = sim.client().unwrap();
    storage_class(&client, "wasm", PROVISIONER, "Immediate").await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let events: Api<Event> = Api::namespaced(client.clone(), "default");

    pvcs.create(&PostParams::default(), &pvc("claim", Some("wasm"), "2Gi"))
        .await
        .unwrap();
    let claim = eventually("provisioner annotations", || {
        let pvcs = pvcs.clone();
        async move {
            let c = pvcs.get("claim").await.ok()?;
            let a = c.annotations();
            (a.get("volume.kubernetes.io/storage-provisioner")
                .map(String::as_str)
                == Some(PROVISIONER)
                && a.get("volume.beta.kubernetes.io/storage-provisioner")
                    .map(String::as_str)
                    == Some(PROVISIONER))
            .then_some(c)
        }
    })
    .await;
    eventually("ExternalProvisioning event", || {
        let events = events.clone();
        async move {
            let l =
                events
                    .list(&ListParams::default().fields(
                        "involvedObject.name=claim,involvedObject.kind=PersistentVolumeClaim",
                    ))
                    .await
                    .ok()?;
            l.items
                .iter()
                .any(|e| e.reason.as_deref() == Some("ExternalProvisioning"))
                .then_some(())
        }
    })
    .await;

    // The provisioner saves a PV pre-bound to the claim (with uid).
    let mut volume = pv("pvc-1", "wasm", "2Gi");
    volume.metadata.annotations = Some(
        [(
            "pv.kubernetes.io/provisioned-by".to_string(),
            PROVISIONER.to_string(),
        )]
        .into(),
    );
    let spec = volume.spec.as_mut().unwrap();
    spec.persistent_volume_reclaim_policy = Some("Delete".into());
    spec.claim_ref = Some(k8s_openapi::api::core::v1::ObjectReference {
        kind: Some("PersistentVolumeClaim".into()),
        api_version: Some("v1".into()),
        namespace: Some("default".into()),
        name: Some("claim".into()),
        uid: claim.metadata.uid.clone(),
        ..Default::default()
    });
    pvs.create(&PostParams::default(), &volume).await.unwrap();

    let bound = eventually("claim Bound", || {
        let pvcs = pvcs.clone();
        async move {
            let c = pvcs.get("claim").await.ok()?;
            (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
        }
    })
    .await;
    assert_eq!(
        bound.spec.as_ref().unwrap().volume_name.as_deref(),
        Some("pvc-1")
    );
    assert_eq!(
        bound
            .annotations()
            .get("pv.kubernetes.io/bind-completed")
            .map(String::as_str),
        Some("yes")
    );
    let status = bound.status.as_ref().unwrap();
    assert_eq!(status.capacity.as_ref().unwrap()["storage"].0, "2Gi");
    assert_eq!(
        status.access_modes.as_deref(),
        Some(&["ReadWriteOnce".to_string()][..])
    );
    let volume = pvs.get("pvc-1").await.unwrap();
    assert_eq!(
        volume.status.as_ref().unwrap().phase.as_deref(),
        Some("Bound")
    );
    assert!(
        !volume
            .annotations()
            .contains_key("pv.kubernetes.io/bound-by-controller"),
        "the provisioner made this binding, not the controller"
    );
    assert_eq!(volume.finalizers(), ["kubernetes.io/pv-protection"]);
    assert!(volume
        .status
        .as_ref()
        .unwrap()
        .last_phase_transition_time
        .is_some());

    // Claim deleted (no pod uses it) → gone → PV Released (and kept: the provisioner deletes it).
    pvcs.delete("claim", &DeleteParams::default())
        .await
        .unwrap();
    eventually("claim gone", || {
        let pvcs = pvcs.clone();
        async move { pvcs.get_opt("claim").await.ok()?.is_none().then_some(()) }
    })
    .await;
    eventually("PV Released", || {
        let pvs = pvs.clone();
        async move {
            (pvs.get("pvc-1").await.ok()?.status?.phase.as_deref() == Some("Released"))
                .then_some(())
        }
    })
    .await;

    // Deleting a Released PV: pv-protection is lifted, the PV goes.
    pvs.delete("pvc-1", &DeleteParams::default()).await.unwrap();
    eventually("PV gone", || {
        let pvs = pvs.clone();
        async move { pvs.get_opt("pvc-1").await.ok()?.is_none().then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn static_binding_marks_bound_by_controller() {
    let sim = start().await;
    let client = sim.client().unwrap();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    pvs.create(&PostParams::default(), &pv("big", "manual", "10Gi"))
        .await
        .unwrap();
    pvs.create(&PostParams::default(), &pv("small", "manual", "1Gi"))
        .await
        .unwrap();
    pvs.create(&PostParams::default(), &pv("other-class", "fast", "1Gi"))
        .await
        .unwrap();
    pvcs.create(
        &PostParams::default(),
        &pvc("want", Some("manual"), "500Mi"),
    )
    .await
    .unwrap();
    let c = eventually("claim bound", || {
        let pvcs = pvcs.clone();
        async move {
            let c = pvcs.get("want").await.ok()?;
            (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
        }
    })
    .await;
    assert_eq!(
        c.spec.unwrap().volume_name.as_deref(),
        Some("small"),
        "smallest matching volume"
    );
    let v = pvs.get("small").await.unwrap();
    assert_eq!(
        v.annotations()
            .get("pv.kubernetes.io/bound-by-controller")
            .map(String::as_str),
        Some("yes")
    );
    assert_eq!(v.spec.unwrap().claim_ref.unwrap().uid, c.metadata.uid);
    assert_eq!(
        pvs.get("big")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Available")
    );
}

#[tokio::test]
async fn pvc_protection_waits_for_pods() {
    let sim = start().await;
    let client = sim.client().unwrap();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pvcs.create(&PostParams::default(), &pvc("used", Some("none"), "1Gi"))
        .await
        .unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}],
                 "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "used"}}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    pvcs.delete("used", &DeleteParams::default()).await.unwrap();
    // Give the controller a chance to (wrongly) remove the finalizer, then check it held.
    let held = eventually("claim marked for deletion", || {
        let pvcs = pvcs.clone();
        async move {
            pvcs.get_opt("used")
                .await
                .ok()?
                .filter(|c| c.metadata.deletion_timestamp.is_some())
        }
    })
    .await;
    assert!(held
        .finalizers()
        .contains(&"kubernetes.io/pvc-protection".to_string()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        pvcs.get_opt("used").await.unwrap().is_some(),
        "claim in use by a pod must stay"
    );
    pods.delete("user", &DeleteParams::default()).await.unwrap();
    eventually("claim gone once unused", || {
        let pvcs = pvcs.clone();
        async move { pvcs.get_opt("used").await.ok()?.is_none().then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn wait_for_first_consumer_needs_the_scheduler() {
    let sim = start().await;
    let client = sim.client().unwrap();
    storage_class(&client, "wffc", PROVISIONER, "WaitForFirstConsumer").await;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    pvcs.create(&PostParams::default(), &pvc("late", Some("wffc"), "1Gi"))
        .await
        .unwrap();
    eventually("WaitForFirstConsumer event", || {
        let events = events.clone();
        async move {
            let l = events
                .list(&ListParams::default().fields("involvedObject.name=late"))
                .await
                .ok()?;
            l.items
                .iter()
                .any(|e| e.reason.as_deref() == Some("WaitForFirstConsumer"))
                .then_some(())
        }
    })
    .await;
    assert!(!pvcs
        .get("late")
        .await
        .unwrap()
        .annotations()
        .contains_key("volume.kubernetes.io/storage-provisioner"));

    assert!(sim
        .schedule_claim("default", "late", "no-such-node")
        .await
        .is_err());
    sim.schedule_claim("default", "late", "kube-sim-node")
        .await
        .unwrap();
    let c = eventually("provisioner annotation after scheduling", || {
        let pvcs = pvcs.clone();
        async move {
            let c = pvcs.get("late").await.ok()?;
            c.annotations()
                .contains_key("volume.kubernetes.io/storage-provisioner")
                .then_some(c)
        }
    })
    .await;
    assert_eq!(
        c.annotations()["volume.kubernetes.io/selected-node"],
        "kube-sim-node"
    );
}

#[tokio::test]
async fn namespace_deletion_removes_its_content() {
    let sim = start().await;
    let client = sim.client().unwrap();
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "scratch"}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "scratch");
    cms.create(&PostParams::default(), &cm("one", json!({})))
        .await
        .unwrap();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "scratch");
    pvcs.create(&PostParams::default(), &pvc("c", Some("none"), "1Gi"))
        .await
        .unwrap();
    nss.delete("scratch", &DeleteParams::default())
        .await
        .unwrap();
    eventually("namespace gone", || {
        let nss = nss.clone();
        async move { nss.get_opt("scratch").await.ok()?.is_none().then_some(()) }
    })
    .await;
    assert!(cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
}

#[tokio::test]
async fn events_api_events_are_core_events_too() {
    use kube::runtime::events::{Event as NewEvent, EventType, Recorder, Reporter};
    let sim = start().await;
    let client = sim.client().unwrap();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim = pvcs
        .create(&PostParams::default(), &pvc("evt", Some("none"), "1Gi"))
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "wasmprov".into(),
            instance: Some("host-0".into()),
        },
    );
    let ev = NewEvent {
        type_: EventType::Normal,
        reason: "Provisioning".into(),
        note: Some("External provisioner is provisioning volume".into()),
        action: "Provision".into(),
        secondary: None,
    };
    recorder
        .publish(&ev, &kube::Resource::object_ref(&claim, &()))
        .await
        .unwrap();
    recorder
        .publish(&ev, &kube::Resource::object_ref(&claim, &()))
        .await
        .unwrap();

    // Written through events.k8s.io/v1, readable as core/v1 (what kubectl describe lists).
    let core: Api<Event> = Api::namespaced(client.clone(), "default");
    let found = core
        .list(&ListParams::default().fields("involvedObject.name=evt,reason=Provisioning"))
        .await
        .unwrap();
    assert_eq!(found.items.len(), 1, "one event, aggregated as a series");
    let e = &found.items[0];
    assert_eq!(
        e.message.as_deref(),
        Some("External provisioner is provisioning volume")
    );
    assert_eq!(e.reporting_component.as_deref(), Some("wasmprov"));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));

    // The new API validates what it requires.
    let v1: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, "default");
    let bare: k8s_openapi::api::events::v1::Event =
        serde_json::from_value(json!({"metadata": {"name": "bare"}, "eventTime": null})).unwrap();
    assert_eq!(
        status_of(v1.create(&PostParams::default(), &bare).await.unwrap_err()).code,
        422
    );
    let listed = v1
        .list(&ListParams::default().fields("regarding.name=evt,reason=Provisioning"))
        .await
        .unwrap();
    assert_eq!(
        listed.items[0].note.as_deref(),
        Some("External provisioner is provisioning volume")
    );
}

#[tokio::test]
async fn discovery_plain_and_aggregated() {
    let sim = start().await;
    let client = sim.client().unwrap();
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let (sc, caps) = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .find(|(r, _)| r.plural == "storageclasses")
        .expect("storageclasses discovered");
    assert_eq!(
        (sc.group.as_str(), sc.version.as_str(), sc.kind.as_str()),
        ("storage.k8s.io", "v1", "StorageClass")
    );
    assert_eq!(caps.scope, kube::discovery::Scope::Cluster);
    assert!(discovery.has_group("coordination.k8s.io") && discovery.has_group("events.k8s.io"));

    // Aggregated discovery only for an exact media-type match.
    let get = |accept: &str| {
        http::Request::get("/apis")
            .header("accept", accept)
            .body(Vec::new())
            .unwrap()
    };
    let agg: Value = client
        .request(get(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        ))
        .await
        .unwrap();
    assert_eq!(agg["kind"], "APIGroupDiscoveryList");
    assert_eq!(agg["apiVersion"], "apidiscovery.k8s.io/v2");
    let plain: Value = client
        .request(get(
            "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList,application/json",
        ))
        .await
        .unwrap();
    assert_eq!(plain["kind"], "APIGroupList");
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "33")
    );
}

#[tokio::test]
async fn lease_optimistic_concurrency_for_leader_election() {
    use k8s_openapi::api::coordination::v1::Lease;
    let sim = start().await;
    let leases: Api<Lease> = Api::namespaced(sim.client().unwrap(), "kube-system");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "wasmprov-leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "2026-01-01T00:00:00.000000Z"}
    }))
    .unwrap();
    let held = leases.create(&PostParams::default(), &lease).await.unwrap();
    // Two candidates race to take the lease from the same read: exactly one wins.
    let mut b = held.clone();
    b.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let mut c = held.clone();
    c.spec.as_mut().unwrap().holder_identity = Some("c".into());
    leases
        .replace("wasmprov-leader", &PostParams::default(), &b)
        .await
        .unwrap();
    let err = status_of(
        leases
            .replace("wasmprov-leader", &PostParams::default(), &c)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    let now = leases.get("wasmprov-leader").await.unwrap();
    assert_eq!(now.spec.unwrap().holder_identity.as_deref(), Some("b"));
}

#[tokio::test]
async fn claim_naming_a_volume_and_recreated_claims() {
    let sim = start().await;
    let client = sim.client().unwrap();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    pvs.create(&PostParams::default(), &pv("chosen", "manual", "1Gi"))
        .await
        .unwrap();
    let mut claim = pvc("picky", Some("manual"), "1Gi");
    claim.spec.as_mut().unwrap().volume_name = Some("chosen".into());
    pvcs.create(&PostParams::default(), &claim).await.unwrap();
    let bound = eventually("claim bound to the volume it named", || {
        let pvcs = pvcs.clone();
        async move {
            let c = pvcs.get("picky").await.ok()?;
            (c.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(c)
        }
    })
    .await;
    // The user chose the volume: the claim is not marked bound-by-controller, the PV is.
    assert!(!bound
        .annotations()
        .contains_key("pv.kubernetes.io/bound-by-controller"));
    let v = pvs.get("chosen").await.unwrap();
    assert_eq!(
        v.annotations()
            .get("pv.kubernetes.io/bound-by-controller")
            .map(String::as_str),
        Some("yes")
    );

    // Drop the protection finalizer to delete at once, then recreate a claim with the
    // same name: it has a new uid, so the old volume is Released, not re-bound.
    pvcs.patch(
        "picky",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    pvcs.delete("picky", &DeleteParams::default())
        .await
        .unwrap();
    pvcs.create(&PostParams::default(), &pvc("picky", Some("manual"), "1Gi"))
        .await
        .unwrap();
    eventually("old volume Released", || {
        let pvs = pvs.clone();
        async move {
            (pvs.get("chosen").await.ok()?.status?.phase.as_deref() == Some("Released"))
                .then_some(())
        }
    })
    .await;
    let again = pvcs.get("picky").await.unwrap();
    assert_eq!(again.status.unwrap().phase.as_deref(), Some("Pending"));
}

#[tokio::test]
async fn config_maps_are_limited_to_one_mebibyte() {
    let sim = start().await;
    let cms: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");
    let big = |name: &str, bytes: usize| -> ConfigMap {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "binaryData": {"plugin.wasm": k8s_openapi::ByteString(vec![0u8; bytes])}
        }))
        .unwrap()
    };
    // 1 MiB of values fits (keys are not counted); one byte more is
    // refused with 422, as kube-apiserver's ValidateConfigMap does.
    cms.create(&PostParams::default(), &big("fits", 1024 * 1024))
        .await
        .unwrap();
    let err = status_of(
        cms.create(&PostParams::default(), &big("too-big", 1024 * 1024 + 1))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(
        err.message
            .ends_with("[]: Too long: may not be more than 1048576 bytes"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn watch_timeout_and_oversized_requests() {
    let sim = start().await;
    let client = sim.client().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let started = std::time::Instant::now();
    let mut s = cms
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap()
        .boxed();
    // A final bookmark (bookmarks are allowed by default), then the end of the stream.
    let last = tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("bookmark before the end");
    assert!(
        matches!(&last, Some(Ok(WatchEvent::Bookmark(b))) if b.metadata.resource_version == rv),
        "{last:?}"
    );
    let end = tokio::time::timeout(Duration::from_secs(5), s.next())
        .await
        .expect("watch ends by its timeout");
    assert!(end.is_none() && started.elapsed() >= Duration::from_millis(900));

    // Bodies over the real server's 3 MiB limit: 413.
    let body = vec![b' '; 3 * 1024 * 1024 + 1];
    let req = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(body)
        .unwrap();
    let err = status_of(client.request::<Value>(req).await.unwrap_err());
    assert_eq!(
        (err.code, err.reason.as_str()),
        (413, "RequestEntityTooLarge")
    );
}

#[tokio::test]
async fn request_log_records_rbac_verbs_and_bearer_tokens() {
    let sim = start_with(kube_sim::Config {
        record_requests: true,
        ..kube_sim::Config::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, sim.kubeconfig_with_token("alice")).unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let alice: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    let anonymous: Api<ConfigMap> = Api::namespaced(sim.client().unwrap(), "default");

    alice
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    alice.get("a").await.unwrap();
    alice
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .unwrap();
    let mut a = alice.get("a").await.unwrap();
    a.data = None;
    alice
        .replace("a", &PostParams::default(), &a)
        .await
        .unwrap();
    anonymous.list(&ListParams::default()).await.unwrap();
    alice.delete("a", &DeleteParams::default()).await.unwrap();
    alice
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();

    let seen: Vec<(String, String, String)> = sim
        .requests()
        .into_iter()
        .map(|r| {
            assert_eq!(
                (r.api_group.as_str(), r.resource.as_str()),
                ("", "configmaps")
            );
            assert_eq!(r.namespace, "default");
            (r.user, r.verb, r.name)
        })
        .collect();
    let want = [
        ("alice", "create", ""),
        ("alice", "get", "a"),
        ("alice", "patch", "a"),
        ("alice", "get", "a"),
        ("alice", "update", "a"),
        ("", "list", ""),
        ("alice", "delete", "a"),
        ("alice", "deletecollection", ""),
    ]
    .map(|(u, v, n)| (u.to_owned(), v.to_owned(), n.to_owned()));
    assert_eq!(seen, want);
}

#[tokio::test]
async fn serves_the_objects_of_a_provisioners_manifests() {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let sim = start().await;
    let client = sim.client().unwrap();
    let pp = PostParams::default();
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
    Api::namespaced(client.clone(), "default")
        .create(&pp, &sa)
        .await
        .unwrap();
    let rule = json!([{"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get"]}]);
    let cr: ClusterRole =
        serde_json::from_value(json!({"metadata": {"name": "p"}, "rules": rule})).unwrap();
    Api::all(client.clone()).create(&pp, &cr).await.unwrap();
    let binding = json!({
        "metadata": {"name": "p"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "p"},
        "subjects": [{"kind": "ServiceAccount", "name": "p", "namespace": "default"}],
    });
    let crb: ClusterRoleBinding = serde_json::from_value(binding.clone()).unwrap();
    Api::all(client.clone()).create(&pp, &crb).await.unwrap();
    let role: Role =
        serde_json::from_value(json!({"metadata": {"name": "p"}, "rules": rule})).unwrap();
    Api::namespaced(client.clone(), "default")
        .create(&pp, &role)
        .await
        .unwrap();
    let rb: RoleBinding = serde_json::from_value(binding).unwrap();
    Api::namespaced(client.clone(), "default")
        .create(&pp, &rb)
        .await
        .unwrap();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {
            "selector": {"matchLabels": {"app": "p"}},
            "template": {
                "metadata": {"labels": {"app": "p"}},
                "spec": {"containers": [{"name": "p", "image": "example.invalid/p:1"}]},
            },
        },
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    deployments.create(&pp, &deployment).await.unwrap();
    assert_eq!(
        deployments
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let discovery = kube::Discovery::new(client).run().await.unwrap();
    assert!(discovery.has_group("apps") && discovery.has_group("rbac.authorization.k8s.io"));
}
