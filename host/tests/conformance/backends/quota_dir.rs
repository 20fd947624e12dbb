//! quota-dir (the C plugin): quotas written, grown, never shrunk, and the
//! pool never overfilled.

use wasmprov::policy::PolicySet;
use wasmprov::provisioner::{
    with_class_parameters, ProvisionError, ProvisionState, ResizeError, ResizeOptions, ResizeState,
    Resized,
};
use wasmprov::wasm_provisioner::WasmProvisioner;

use super::*;

/// The sandbox policy of the quota-dir tests (`@@`: the scratch directory):
/// `@@/volumes` is hostRoot, preopened at the plugin's default root.
const QUOTA_DIR_POLICY: &str =
    "plugins:\n  quota-dir:\n    preopens: [{host: @@/volumes, guest: /volumes, mode: read-write}]\n    \
     output: {sources: [hostPath], paths: [@@/volumes], annotationPrefixes: [quota-dir/]}\n";

#[test]
fn quota_dir_writes_the_quota_and_refuses_claims_over_max_bytes() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.path("volumes")).unwrap();
    let policy = s.write("policy.yaml", QUOTA_DIR_POLICY);
    let class = s.class(
        "quota",
        "quota-dir",
        "hostRoot: @@/volumes, maxBytes: '10737418240'",
    );
    let pv = invoke(
        "quota-dir",
        &class,
        &s.claim("data", "1500M", ""),
        Some(&policy),
    )
    .unwrap();
    let name = pv.metadata.name.clone().unwrap();
    let spec = pv.spec.clone().unwrap();
    // 1500M rounded up to whole MiB.
    assert_eq!(spec.capacity.unwrap()["storage"].0, "1431Mi");
    let quota = std::fs::read_to_string(s.path(&format!("volumes/{name}/.quota"))).unwrap();
    assert_eq!(quota, "1500512256\n");
    assert_eq!(
        spec.host_path.unwrap().path,
        s.path(&format!("volumes/{name}")).display().to_string()
    );
    std::fs::write(s.path(&format!("volumes/{name}/data")), "user data").unwrap();
    delete("quota-dir", &s, &pv, &class, Some(&policy)).unwrap();
    assert!(!s.path(&format!("volumes/{name}")).exists());

    let err = invoke(
        "quota-dir",
        &class,
        &s.claim("big", "20Gi", ""),
        Some(&policy),
    )
    .unwrap_err();
    assert!(
        err.contains("invalid-argument") && err.contains("maxBytes of 10737418240"),
        "{err}"
    );
}

// Resizing has no CLI command: these drive quota-dir through the host's
// `WasmProvisioner`, as the lifecycle does in a cluster.

const MI: u64 = 1024 * 1024;
const GI: u64 = 1024 * MI;

/// The quota-dir plugin under [`QUOTA_DIR_POLICY`], with `s/volumes` made.
async fn quota_dir(s: &Scratch) -> WasmProvisioner {
    std::fs::create_dir_all(s.path("volumes")).unwrap();
    let policy = PolicySet::load(&s.write("policy.yaml", QUOTA_DIR_POLICY)).unwrap();
    let p = load(
        "quota-dir",
        &plugin_path("quota-dir"),
        policy.sandbox_for("quota-dir"),
        policy.output_for("quota-dir"),
    )
    .await;
    assert!(p.can_resize(), "quota-dir exports the resizer");
    p
}

/// A quota-dir class with hostRoot `s/volumes` and `params` besides.
fn quota_class(
    s: &Scratch,
    params: &[(&str, &str)],
) -> k8s_openapi::api::storage::v1::StorageClass {
    let root = s.path("volumes").display().to_string();
    let mut all = vec![("plugin", "quota-dir"), ("hostRoot", root.as_str())];
    all.extend_from_slice(params);
    class("quota", &all)
}

async fn provision_quota(
    p: &WasmProvisioner,
    pv_name: &str,
    class: &k8s_openapi::api::storage::v1::StorageClass,
    size: &str,
) -> Result<PersistentVolume, ProvisionError> {
    // As the lifecycle hands it to resize and delete: completed from its class.
    p.provision(&options(pv_name, class.clone(), claim(pv_name, size)))
        .await
        .map(|pv| with_class_parameters(&pv, Some(class)))
}

async fn resize_to(
    p: &WasmProvisioner,
    pv: &PersistentVolume,
    bytes: u64,
) -> Result<Resized, ResizeError> {
    let options = ResizeOptions {
        requested_bytes: bytes,
        limit_bytes: None,
    };
    p.resize(pv, &options).await
}

fn quota_of(s: &Scratch, pv_name: &str) -> String {
    std::fs::read_to_string(s.path(&format!("volumes/{pv_name}/.quota"))).unwrap()
}

#[tokio::test]
async fn quota_dir_grows_the_quota_and_never_shrinks_it() {
    let s = Scratch::new();
    let p = quota_dir(&s).await;
    let class = quota_class(&s, &[("maxBytes", "10737418240")]);
    let pv = provision_quota(&p, "pvc-grow", &class, "1Gi")
        .await
        .unwrap();
    assert_eq!(quota_of(&s, "pvc-grow"), format!("{GI}\n"));

    // 1500M rounded up to whole MiB: 1431Mi.
    let grown = resize_to(&p, &pv, 1_500_000_000).await.unwrap();
    assert_eq!(
        grown,
        Resized {
            capacity_bytes: 1431 * MI,
            node_expansion_required: false
        }
    );
    assert_eq!(quota_of(&s, "pvc-grow"), "1500512256\n");
    let files: Vec<_> = std::fs::read_dir(s.path("volumes/pvc-grow"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(
        files,
        [".quota"],
        "the temporary file was renamed over .quota"
    );

    // Again (the host retries after a restart): the same answer, no change.
    assert_eq!(resize_to(&p, &pv, 1_500_000_000).await.unwrap(), grown);
    // Within the granularity, or less than the quota: it holds that already.
    assert_eq!(resize_to(&p, &pv, 1431 * MI - 1).await.unwrap(), grown);
    assert_eq!(resize_to(&p, &pv, GI + 1).await.unwrap(), grown);
    assert_eq!(quota_of(&s, "pvc-grow"), "1500512256\n");

    // The storage is gone: nothing to grow, and the message says so.
    std::fs::remove_dir_all(s.path("volumes/pvc-grow")).unwrap();
    let err = resize_to(&p, &pv, 2 * GI).await.unwrap_err();
    assert_eq!(err.state, ResizeState::Failed, "{}", err.message);
    let dir = s.path("volumes/pvc-grow").display().to_string();
    for want in ["pvc-grow", dir.as_str(), "is missing", "storage is gone"] {
        assert!(err.message.contains(want), "{want:?} in {}", err.message);
    }
}

#[tokio::test]
async fn quota_dir_refuses_to_grow_past_max_bytes() {
    let s = Scratch::new();
    let p = quota_dir(&s).await;
    let class = quota_class(&s, &[("maxBytes", "2147483648")]);
    let pv = provision_quota(&p, "pvc-max", &class, "1Gi").await.unwrap();

    let err = resize_to(&p, &pv, 3 * GI).await.unwrap_err();
    assert_eq!(err.state, ResizeState::Infeasible, "{}", err.message);
    for want in [
        "pvc-max",
        "3221225472 bytes",
        "maxBytes of 2147483648",
        "ask for at most 2147483648 bytes",
        "raise maxBytes",
    ] {
        assert!(err.message.contains(want), "{want:?} in {}", err.message);
    }
    assert_eq!(quota_of(&s, "pvc-max"), format!("{GI}\n"), "unchanged");
    // Up to maxBytes is fine.
    assert_eq!(
        resize_to(&p, &pv, 2 * GI).await.unwrap().capacity_bytes,
        2 * GI
    );
}

#[tokio::test]
async fn quota_dir_keeps_the_volumes_within_pool_bytes() {
    let s = Scratch::new();
    let p = quota_dir(&s).await;
    let class = quota_class(&s, &[("poolBytes", "3221225472")]);
    // Not volumes: no .quota in them, or not a directory.
    std::fs::create_dir_all(s.path("volumes/lost+found")).unwrap();
    std::fs::write(s.path("volumes/notes"), "5000000000\n").unwrap();

    let a = provision_quota(&p, "pvc-a", &class, "1Gi").await.unwrap();
    let b = provision_quota(&p, "pvc-b", &class, "1Gi").await.unwrap();
    // Provisioning again (idempotent) does not count the volume twice.
    provision_quota(&p, "pvc-b", &class, "1Gi").await.unwrap();

    // 2Gi + 2Gi > 3Gi: refused, and retried (the pool frees up).
    let err = provision_quota(&p, "pvc-c", &class, "2Gi")
        .await
        .unwrap_err();
    assert_eq!(err.state, ProvisionState::Failed, "{}", err.message);
    for want in [
        "pvc-c",
        "is full",
        "hold 2147483648 bytes of this class's poolBytes of 3221225472",
        "1073741824 bytes are free",
        "needs 2147483648",
        "request at most 1073741824 bytes",
    ] {
        assert!(err.message.contains(want), "{want:?} in {}", err.message);
    }
    assert!(!s.path("volumes/pvc-c").exists(), "nothing was created");
    // Bigger than the whole pool: can never succeed.
    let err = provision_quota(&p, "pvc-c", &class, "4Gi")
        .await
        .unwrap_err();
    assert_eq!(
        err.state,
        ProvisionState::InvalidArgument,
        "{}",
        err.message
    );
    assert!(
        err.message.contains("poolBytes of 3221225472"),
        "{}",
        err.message
    );
    // What fits is provisioned: the pool is now full.
    provision_quota(&p, "pvc-c", &class, "1Gi").await.unwrap();

    let err = resize_to(&p, &a, 2 * GI).await.unwrap_err();
    assert_eq!(err.state, ResizeState::Infeasible, "{}", err.message);
    for want in [
        "pvc-a",
        "2147483648 bytes",
        "would overflow",
        "other volumes hold 2147483648 bytes of poolBytes of 3221225472",
        "ask for at most 1073741824 bytes",
        "raise poolBytes",
    ] {
        assert!(err.message.contains(want), "{want:?} in {}", err.message);
    }
    assert_eq!(quota_of(&s, "pvc-a"), format!("{GI}\n"), "unchanged");

    // Deleting a volume frees its share of the pool.
    p.delete(&b).await.unwrap();
    let grown = resize_to(&p, &a, 2 * GI).await.unwrap();
    assert_eq!(grown.capacity_bytes, 2 * GI);
    assert_eq!(quota_of(&s, "pvc-a"), format!("{}\n", 2 * GI));
    let err = provision_quota(&p, "pvc-d", &class, "1Mi")
        .await
        .unwrap_err();
    assert_eq!(err.state, ProvisionState::Failed, "{}", err.message);
    assert!(
        err.message.contains("0 bytes are free") && !err.message.contains("request at most"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn quota_dir_claims_racing_for_the_pool_never_overfill_it() {
    let s = Scratch::new();
    let p = quota_dir(&s).await;
    let class = quota_class(&s, &[("poolBytes", "2147483648")]);
    provision_quota(&p, "pvc-first", &class, "1Gi")
        .await
        .unwrap();

    // Room for one more: of claims made at once, at most one gets it (a
    // loser of a race answers failed and is retried).
    let names = ["pvc-r0", "pvc-r1", "pvc-r2", "pvc-r3"];
    let results = futures::future::join_all(
        names
            .iter()
            .map(|name| provision_quota(&p, name, &class, "1Gi")),
    )
    .await;
    let won = results.iter().filter(|r| r.is_ok()).count();
    assert!(won <= 1, "{results:?}");
    for (name, result) in names.iter().zip(&results) {
        if let Err(e) = result {
            assert_eq!(e.state, ProvisionState::Failed, "{}", e.message);
            assert!(
                !s.path(&format!("volumes/{name}")).exists(),
                "{name} was removed"
            );
        }
    }
    let total: u64 = std::fs::read_dir(s.path("volumes"))
        .unwrap()
        .map(|e| {
            let quota = e.unwrap().path().join(".quota");
            std::fs::read_to_string(quota)
                .unwrap()
                .trim()
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(total, (1 + won as u64) * GI);
}
