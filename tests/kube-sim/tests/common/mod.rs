//! Shared helpers for the conformance suites.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::PostParams;
use kube::Api;
use serde_json::json;

pub const PROVISIONER: &str = "wasmprov.io/host";

pub async fn start() -> kube_sim::Simulator {
    start_with(kube_sim::Config::default()).await
}

pub async fn start_with(config: kube_sim::Config) -> kube_sim::Simulator {
    kube_sim::Simulator::start(config)
        .await
        .expect("simulator starts")
}

/// Poll `f` until it yields a value; panic after 10 s with `what`.
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn pvc(name: &str, class: Option<&str>, size: &str) -> PersistentVolumeClaim {
    let mut v = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
    });
    if let Some(c) = class {
        v["spec"]["storageClassName"] = json!(c);
    }
    serde_json::from_value(v).expect("valid pvc")
}

pub fn pv(name: &str, class: &str, size: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": class,
            "hostPath": {"path": format!("/tmp/{name}")}
        }
    }))
    .expect("valid pv")
}

pub async fn storage_class(
    client: &kube::Client,
    name: &str,
    provisioner: &str,
    mode: &str,
) -> StorageClass {
    let sc: StorageClass = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": mode,
        "reclaimPolicy": "Delete"
    }))
    .expect("valid class");
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &sc)
        .await
        .expect("create storage class")
}

pub fn status_of(err: kube::Error) -> kube::core::Status {
    match err {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error Status, got {other:?}"),
    }
}
