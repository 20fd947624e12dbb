//! Capacity on real nodes, decided by the real scheduler: each node's
//! hostpath root becomes a disk of its own (an ext4 image of a set size,
//! loop-mounted in the node's mount namespace), the node hosts restart onto
//! them, and then
//! - pods whose claims do not fit on the small node run on the others;
//! - a claim larger than any node leaves its pod Pending with the
//!   scheduler's own reason, and no volume is made;
//! - twenty claims racing for the small node, which holds ten, give
//!   exactly ten volumes there, and their pods' other ten run elsewhere;
//! - what the node hosts publish follows the volumes as they come and go;
//!
//! and the nodes get their hostpath root back as it was.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client, ResourceExt};
use test_cluster::Cluster;

use super::support::node::{apply, apply_in, node_hosts, run, LIMIT, NS};
use super::support::{bound_and_handed_back, events_about, eventually_within};
use super::{delete_all, namespace, pinned_node, pod_writing, running, HOST_ROOT};

const MI: u64 = 1 << 20;

pub async fn pods_go_where_their_volumes_fit(cluster: &Cluster) {
    let client = cluster.client().await.unwrap();
    // deploy/'s demo volume (1Gi) would take all of its node's new disk.
    remove_the_demo(&client).await;
    let nodes = cluster.node_names();
    let small = nodes[0].clone();
    let images = tempfile::tempdir().unwrap();
    for (i, node) in nodes.iter().enumerate() {
        let size = if i == 0 { 64 } else { 256 };
        give_a_disk(
            cluster,
            node,
            &images.path().join(format!("{node}.img")),
            size,
        );
    }
    restart_node_hosts(cluster, &client).await;
    let start = eventually_within(LIMIT, "each node host publishes its new disk", || async {
        let room = published(&client, "hostpath").await;
        (room.len() == nodes.len() && room[&small] < 64 * MI && room[&small] > 40 * MI)
            .then_some(room)
    })
    .await;
    eprintln!("published at start: {start:?}");
    let listed = run(cluster
        .kubectl()
        .args(["-n", NS, "get", "csistoragecapacities"]));
    assert!(listed.contains("hostpath-retain"), "{listed}");

    let ns = "capacity";
    apply(cluster, &namespace(ns));

    // Claims of 100Mi: never on the small node.
    for i in 0..3 {
        let name = format!("big-{i}");
        apply_in(cluster, ns, &sized_claim(ns, &name, "100Mi", None));
        apply_in(
            cluster,
            ns,
            &pod_writing(ns, &name, &name, "hello", "big", "{}"),
        );
    }
    for i in 0..3 {
        let pod = running(&client, ns, &format!("big-{i}")).await;
        let on = pod.spec.unwrap().node_name.unwrap();
        assert_ne!(on, small, "big-{i} is on the node that cannot hold it");
    }

    // Larger than any node: Pending for the scheduler's reason, no volume.
    apply_in(cluster, ns, &sized_claim(ns, "huge", "1Gi", None));
    apply_in(
        cluster,
        ns,
        &pod_writing(ns, "huge", "huge", "hello", "huge", "{}"),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let reason = eventually_within(LIMIT, "the huge pod is unschedulable", || async {
        let pod = pods.get_opt("huge").await.ok()??;
        let conditions = pod.status?.conditions?;
        let scheduled = conditions.into_iter().find(|c| c.type_ == "PodScheduled")?;
        (scheduled.status == "False").then_some(scheduled.message.unwrap_or_default())
    })
    .await;
    assert!(
        reason.contains("did not have enough free storage"),
        "{reason}"
    );

    // Twenty claims as the scheduler would place them at once (it does not
    // count claims it placed before on a node), each a bit over a tenth of
    // the small node: ten fit there, the others are handed back.
    let each = start[&small] * 2 / 21 / 1024;
    let racing: Vec<String> = (0..20).map(|i| format!("race-{i:02}")).collect();
    let claims_yaml: String = (racing.iter())
        .map(|name| sized_claim(ns, name, &format!("{each}Ki"), Some(&small)) + "---\n")
        .collect();
    apply_in(cluster, ns, &claims_yaml);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let (bound, handed_back) = eventually_within(
        LIMIT,
        "each racing claim is bound or handed back",
        || async {
            let all = claims.list(&ListParams::default()).await.ok()?.items;
            let (bound, handed_back) = bound_and_handed_back(&all, "race-");
            (bound.len() + handed_back.len() == racing.len()).then_some((bound, handed_back))
        },
    )
    .await;
    assert_eq!(
        (bound.len(), handed_back.len()),
        (10, 10),
        "bound: {bound:?}"
    );
    let first = handed_back.iter().next().unwrap();
    let why = format!("node {small} cannot hold");
    eventually_within(
        LIMIT,
        &format!("{first}'s events say why it was handed back"),
        || async {
            let said = events_about(&client, ns, first).await?;
            said.iter()
                .any(|e| e.message.as_deref().is_some_and(|m| m.contains(&why)))
                .then_some(())
        },
    )
    .await;
    // Their pods: the bound ten run on the small node, the others where
    // the scheduler finds room.
    let pods_yaml: String = (racing.iter())
        .map(|name| pod_writing(ns, name, name, "hello", "race", "{}") + "---\n")
        .collect();
    apply_in(cluster, ns, &pods_yaml);
    for name in &racing {
        let on = running(&client, ns, name)
            .await
            .spec
            .unwrap()
            .node_name
            .unwrap();
        assert_eq!(on == small, bound.contains(name), "pod {name} runs on {on}");
    }
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let on_small = volumes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|v| v.name_any().starts_with("pvc-") && pinned_node(v) == small)
        .count();
    assert_eq!(on_small, 10, "exactly ten volumes on {small}");
    let full = published(&client, "hostpath").await;
    assert!(full[&small] < each * 1024, "{full:?}");

    // All gone: the room comes back.
    delete_all(&client, ns, &[]).await;
    eventually_within(LIMIT, "the room comes back", || async {
        let room = published(&client, "hostpath").await;
        nodes
            .iter()
            .all(|n| room.get(n).is_some_and(|r| start[n].abs_diff(*r) < MI))
            .then_some(())
    })
    .await;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::default())
        .await
        .unwrap();

    // The nodes get their hostpath root back as it was (what the scenarios
    // after this one read through Cluster::node_view).
    for node in &nodes {
        run(cluster.command_on(node, "umount").args(["-l", HOST_ROOT]));
    }
    restart_node_hosts(cluster, &client).await;
}

/// Deletes deploy/'s demo pod and claim; returns once its volume is gone.
async fn remove_the_demo(client: &Client) {
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let _ = Api::<Pod>::namespaced(client.clone(), NS)
        .delete("demo", &now)
        .await;
    let _ = Api::<PersistentVolumeClaim>::namespaced(client.clone(), NS)
        .delete("demo", &DeleteParams::default())
        .await;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    eventually_within(LIMIT, "the demo volume to be deleted", || async {
        let all = volumes.list(&ListParams::default()).await.ok()?.items;
        let demo = |v: &PersistentVolume| {
            let claim = v.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            claim.is_some_and(|c| c.name.as_deref() == Some("demo"))
        };
        (!all.iter().any(demo)).then_some(())
    })
    .await;
}

/// Gives node `node` a disk of `mib` MiB at the hostpath root: an ext4
/// image, loop-mounted where the node's processes see the root.
fn give_a_disk(cluster: &Cluster, node: &str, image: &Path, mib: u64) {
    run(Command::new("truncate")
        .args(["-s", &format!("{mib}M")])
        .arg(image));
    run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(image));
    run(cluster
        .command_on(node, "mount")
        .args(["-o", "loop"])
        .arg(image)
        .arg(HOST_ROOT));
}

/// Deletes the node hosts' pods and waits for their successors, which
/// mount the hostpath root as it is now (their init container hands the
/// new filesystem's root to the host's user).
async fn restart_node_hosts(cluster: &Cluster, client: &Client) {
    let before: BTreeSet<String> = node_hosts(client).await.into_iter().collect();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    for pod in &before {
        pods.delete(pod, &DeleteParams::default()).await.unwrap();
    }
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let now = node_hosts(client).await;
        let mut ready = now.len() == before.len() && now.iter().all(|p| !before.contains(p));
        for name in &now {
            let pod = pods.get(name).await.unwrap();
            let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
            ready &= conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
        }
        if ready {
            return;
        }
        if std::time::Instant::now() > deadline {
            let described = run(cluster.kubectl().args(["-n", NS, "describe", "pods"]));
            panic!("the node hosts did not come back after {LIMIT:?}:\n{described}");
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// What the node hosts publish for `class`: capacity by node.
async fn published(client: &Client, class: &str) -> BTreeMap<String, u64> {
    let all = Api::<CSIStorageCapacity>::namespaced(client.clone(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    all.into_iter()
        .filter(|c| c.storage_class_name == class)
        .filter_map(|c| {
            let node = c
                .node_topology?
                .match_labels?
                .remove("kubernetes.io/hostname")?;
            let bytes = wasmprov::quantity::parse_bytes(&c.capacity?.0).ok()?;
            Some((node, bytes))
        })
        .collect()
}

/// A claim of the hostpath class asking for `size`, its node already
/// selected (as the scheduler writes it) if `node` is given.
fn sized_claim(ns: &str, name: &str, size: &str, node: Option<&str>) -> String {
    let selected = node
        .map(|n| format!("  annotations:\n    volume.kubernetes.io/selected-node: {n}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: {name}\n  namespace: {ns}\n{selected}spec:\n  storageClassName: hostpath\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: {size}\n"
    )
}
