//! Capacity: a node host publishes what its node can still hold for each
//! class (a CSIStorageCapacity the scheduler reads) and never promises a
//! byte of its disk twice: claims racing for the last room of a node get
//! exactly what fits, the rest are handed back to the scheduler, and a
//! volume cannot grow past what is left. The node's disk is a tmpfs of a
//! set size (root, as CI is), so the figures are exact.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use wasmprov::lifecycle::capacity::publish::Publishing;

use super::support::*;
use super::{Host, Served, NODE_PROVISIONER};

on_both_servers!(
    a_node_host_publishes_its_room_and_never_promises_it_twice,
    a_node_host_that_cannot_measure_its_disk_says_so_on_the_class,
    the_room_a_plugin_reports_is_checked_then_published_and_never_promised_twice,
);

const MI: u64 = 1 << 20;

/// A tmpfs of `size` bytes, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .expect("running mount");
        assert!(
            status.success(),
            "mounting a tmpfs needs root (CI runs as root): {status}"
        );
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn quantity_bytes(q: &Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> u64 {
    wasmprov::quantity::parse_bytes(&q.as_ref().expect("a quantity").0).unwrap()
}

/// What the host published for class `class` on node n1: capacity and
/// maximumVolumeSize, once there is exactly one such object.
async fn published(client: &Client, class: &str) -> Option<(u64, u64)> {
    let all = Api::<CSIStorageCapacity>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .ok()?
        .items;
    let ours: Vec<&CSIStorageCapacity> = all
        .iter()
        .filter(|c| c.storage_class_name == class)
        .collect();
    let [one] = ours.as_slice() else {
        return None;
    };
    let topology = one.node_topology.as_ref()?.match_labels.as_ref()?;
    assert_eq!(
        topology.get("kubernetes.io/hostname").map(String::as_str),
        Some("n1"),
        "published for its own node: {one:?}"
    );
    Some((
        quantity_bytes(&one.capacity),
        quantity_bytes(&one.maximum_volume_size),
    ))
}

/// Waits until what is published for `class` satisfies `ok`.
async fn published_until(client: &Client, class: &str, what: &str, ok: impl Fn(u64) -> bool) {
    let got = eventually(what, || async {
        let (capacity, max) = published(client, class).await?;
        assert_eq!(capacity, max, "both fields say the same room");
        ok(capacity).then_some(capacity)
    })
    .await;
    eprintln!("{what}: {got} bytes");
}

async fn claim_of(client: &Client, class: &str, name: &str, size: &str, node: &str) {
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default",
                     "annotations": {"volume.kubernetes.io/selected-node": node}},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": size}}},
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
}

/// Twenty claims of 6Mi of `class` for node n1, named `<prefix><i>`, all
/// at once; once each is bound or handed back to the scheduler, checks that
/// ten were bound. Their names, then those bound and handed back.
async fn race(
    admin: &Client,
    class: &str,
    prefix: &str,
) -> (Vec<String>, BTreeSet<String>, BTreeSet<String>) {
    let names: Vec<String> = (0..20).map(|i| format!("{prefix}{i}")).collect();
    for name in &names {
        claim_of(admin, class, name, "6Mi", "n1").await;
    }
    let claims = Api::<PersistentVolumeClaim>::namespaced(admin.clone(), "default");
    let (bound, handed_back) = eventually("every racing claim is bound or handed back", || async {
        let all = claims.list(&ListParams::default()).await.ok()?.items;
        let (bound, handed_back) = bound_and_handed_back(&all, prefix);
        (bound.len() + handed_back.len() == names.len()).then_some((bound, handed_back))
    })
    .await;
    assert_eq!((bound.len(), handed_back.len()), (10, 10), "{bound:?}");
    (names, bound, handed_back)
}

/// The node host of n1 serving the hostpath plugin in `dir`, publishing its
/// room in `default`, measuring again every `poll`.
async fn publishing_host(admin: &Client, dir: &Path, poll: Duration) -> Host {
    Host::start_with(admin.clone(), dir, Some("n1"), false, |config| {
        config.publish_capacity = Some(Publishing {
            namespace: "default".into(),
            owner: None,
            poll_interval: poll,
        });
    })
    .await
}

/// A class of the hostpath plugin in `dir`, served by the node hosts,
/// waiting for a consumer, whose volumes may grow.
async fn create_class(client: &Client, name: &str, dir: &Path) {
    create_class_of(client, name, "hostpath", dir, &[]).await
}

/// [`create_class`] for `plugin`, with more `parameters`.
async fn create_class_of(
    client: &Client,
    name: &str,
    plugin: &str,
    dir: &Path,
    parameters: &[(&str, &str)],
) {
    let mut params = serde_json::json!({"plugin": plugin, "hostRoot": dir.display().to_string()});
    for (key, value) in parameters {
        params[key] = serde_json::json!(value);
    }
    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "provisioner": NODE_PROVISIONER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": true,
        "parameters": params,
    }))
    .unwrap();
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
}

async fn a_node_host_publishes_its_room_and_never_promises_it_twice(server: Server) {
    let (_api, admin) = TestApi::start(
        server,
        &super::NODES,
        Default::default(),
        Default::default(),
    )
    .await;
    let disk = Tmpfs::mount(64 * MI);
    create_class(&admin, "local", disk.path()).await;
    let host = publishing_host(&admin, disk.path(), Duration::from_secs(2)).await;
    published_until(&admin, "local", "the empty disk is published", |c| {
        c > 63 * MI && c <= 64 * MI
    })
    .await;

    // Twenty claims of 6Mi race for a 64Mi disk: ten fit.
    let (names, bound, handed_back) = race(&admin, "local", "race-").await;
    let claims = Api::<PersistentVolumeClaim>::namespaced(admin.clone(), "default");
    let volumes = Api::<PersistentVolume>::all(admin.clone());
    assert_eq!(
        volumes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        10
    );
    let warned = warnings_of(&admin, handed_back.first().unwrap()).await;
    assert!(
        warned.iter().any(|w| w.contains("node n1 cannot hold 6Mi")
            && w.contains("asking the scheduler for another node")),
        "{warned:?}"
    );
    published_until(&admin, "local", "the room left after ten volumes", |c| {
        c <= 4 * MI
    })
    .await;

    // Growing a volume past what is left is refused before the plugin is
    // asked.
    let grown = bound.first().unwrap();
    claims
        .patch(
            grown,
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"resources": {"requests": {"storage": "20Mi"}}}}),
            ),
        )
        .await
        .unwrap();
    let refusal = eventually("growing past the room left is refused", || async {
        warnings_of(&admin, grown)
            .await
            .into_iter()
            .find(|w| w.contains("cannot hold 20Mi"))
    })
    .await;
    assert!(refusal.contains("ask for less"), "{refusal}");
    assert_eq!(host.plugin_calls("resize"), 0);

    // Volumes go: the room comes back.
    for name in &names {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    eventually("every volume is reclaimed", || async {
        volumes
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    published_until(&admin, "local", "the room comes back", |c| c > 63 * MI).await;
    host.stop().await;
}

/// The plugin's directory goes (a disk unmounted, a directory removed): the
/// host publishes nothing it did not measure, so the scheduler sends no pod
/// there, and says why on the class, once.
async fn a_node_host_that_cannot_measure_its_disk_says_so_on_the_class(server: Server) {
    let (_api, admin) = TestApi::start(
        server,
        &super::NODES,
        Default::default(),
        Default::default(),
    )
    .await;
    let root = tempfile::tempdir().unwrap();
    let disk = root.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    create_class(&admin, "local", &disk).await;
    let host = publishing_host(&admin, &disk, Duration::from_secs(60)).await;
    published_until(&admin, "local", "the directory's room is published", |c| {
        c > 0
    })
    .await;

    std::fs::remove_dir(&disk).unwrap();
    // A class event makes the host look again at once.
    create_class(&admin, "other", &disk).await;
    eventually(
        "nothing is published from a directory that is gone",
        || async {
            let all = Api::<CSIStorageCapacity>::namespaced(admin.clone(), "default")
                .list(&ListParams::default())
                .await
                .ok()?
                .items;
            all.is_empty().then_some(())
        },
    )
    .await;
    let said = eventually("the class says why", || async {
        let events = events_about(&admin, "default", "local").await?;
        let warnings: Vec<String> = (events.into_iter())
            .filter(|e| e.reason.as_deref() == Some("NodeCapacity"))
            .filter_map(|e| e.message)
            .collect();
        (!warnings.is_empty()).then_some(warnings)
    })
    .await;
    assert_eq!(said.len(), 1, "once: {said:?}");
    for part in [
        "node n1",
        "cannot measure the filesystem of",
        "StorageClass local",
    ] {
        assert!(said[0].contains(part), "{said:?}");
    }
    assert!(said[0].contains(&disk.display().to_string()), "{said:?}");
    host.stop().await;
}

/// The test guest that reports the room of a pool itself.
const POOL: Served = Served {
    name: "pool",
    wasm: || rust_guest_path("capacity-pool"),
    guest_dir: "/pool",
};

/// A plugin that reports its room itself (contract 0.3's `capacity`): what
/// it says is published once the host checked it against the disk, claims
/// racing for it get exactly what it holds (the plugin itself never
/// refuses one), and a figure that makes no sense is refused with a
/// warning on the class, the host's own figure published instead.
async fn the_room_a_plugin_reports_is_checked_then_published_and_never_promised_twice(
    server: Server,
) {
    let (_api, admin) = TestApi::start(
        server,
        &super::NODES,
        Default::default(),
        Default::default(),
    )
    .await;
    let disk = Tmpfs::mount(64 * MI);
    let (size, largest) = ((60 * MI).to_string(), (20 * MI).to_string());
    let pool = [("size", size.as_str()), ("largest", largest.as_str())];
    create_class_of(&admin, "pool", "pool", disk.path(), &pool).await;
    let host = Host::start_serving(admin.clone(), POOL, disk.path(), Some("n1"), false, |c| {
        c.publish_capacity = Some(Publishing {
            namespace: "default".into(),
            owner: None,
            poll_interval: Duration::from_secs(2),
        });
    })
    .await;
    eventually("the pool's own figure is published", || async {
        (published(&admin, "pool").await? == (60 * MI, 20 * MI)).then_some(())
    })
    .await;

    // Twenty claims of 6Mi race for a pool of 60Mi: ten fit, though the
    // plugin would make all twenty.
    let (names, _, handed_back) = race(&admin, "pool", "pool-").await;
    let claims = Api::<PersistentVolumeClaim>::namespaced(admin.clone(), "default");
    let warned = warnings_of(&admin, handed_back.first().unwrap()).await;
    assert!(
        warned.iter().any(|w| w
            .contains("node n1 cannot hold 6Mi for StorageClass pool: plugin pool reports")
            && w.contains("asking the scheduler for another node")),
        "{warned:?}"
    );
    eventually("the pool's figure follows its volumes", || async {
        (published(&admin, "pool").await? == (0, 0)).then_some(())
    })
    .await;

    // Figures that make no sense are refused, saying why on the class; the
    // host's own figure for the disk is published instead.
    let too_large = (1u64 << 40).to_string();
    let bad = [
        (
            "negative",
            vec![("report", "negative")],
            "more than any disk holds",
        ),
        (
            "too-large",
            vec![("size", too_large.as_str())],
            "more than the whole filesystem of",
        ),
        (
            "inconsistent",
            vec![("report", "larger-than-available")],
            "a largest volume of 2 with only 1 available",
        ),
        (
            "failing",
            vec![("report", "fail")],
            "capacity-pool: deliberate failure",
        ),
    ];
    for (class, parameters, _) in &bad {
        create_class_of(&admin, class, "pool", disk.path(), parameters).await;
    }
    create_class_of(
        &admin,
        "unreported",
        "pool",
        disk.path(),
        &[("report", "none")],
    )
    .await;
    for (class, _, why) in &bad {
        let said = eventually(
            "the class says why its plugin's figure was refused",
            || async {
                let events = events_about(&admin, "default", class).await?;
                let warnings: Vec<String> = (events.into_iter())
                    .filter(|e| e.reason.as_deref() == Some("NodeCapacity"))
                    .filter_map(|e| e.message)
                    .collect();
                (!warnings.is_empty()).then_some(warnings)
            },
        )
        .await;
        assert!(
            said[0].contains(why)
                && said[0].contains("node n1")
                && said[0].contains(&format!("StorageClass {class}"))
                && said[0].contains("the host publishes its own figure"),
            "{class}: {said:?}"
        );
    }
    for class in [
        "negative",
        "too-large",
        "inconsistent",
        "failing",
        "unreported",
    ] {
        let (capacity, max) = eventually("the host's own figure is published", || async {
            published(&admin, class).await
        })
        .await;
        assert!(
            capacity <= 64 * MI && max <= capacity,
            "{class}: {capacity}"
        );
    }
    let unreported = events_about(&admin, "default", "unreported").await;
    assert!(
        !unreported
            .unwrap_or_default()
            .iter()
            .any(|e| e.type_.as_deref() == Some("Warning")),
        "a plugin with no better figure is no error"
    );

    // Volumes go: the pool's room comes back.
    for name in &names {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    eventually("the pool's room comes back", || async {
        (published(&admin, "pool").await? == (60 * MI, 20 * MI)).then_some(())
    })
    .await;
    assert_eq!(host.plugin_calls("provision"), 10);
    host.stop().await;
}

/// The messages of the Warnings about claim `claim`.
async fn warnings_of(client: &Client, claim: &str) -> Vec<String> {
    events_about(client, "default", claim)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.message)
        .collect()
}
