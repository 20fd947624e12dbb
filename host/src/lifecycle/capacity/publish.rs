//! The capacity a node host tells the scheduler: one `CSIStorageCapacity`
//! per StorageClass it serves, for its node (`nodeTopology` matching the
//! node's hostname label), with what a new volume of that class may still
//! take there as both `capacity` and `maximumVolumeSize`.
//!
//! The scheduler reads them for a WaitForFirstConsumer class whose
//! provisioner has a `CSIDriver` object with `storageCapacity: true`
//! (deploy/csidriver.yaml): a node whose object is missing, or too small
//! for the claim, is not chosen. Both fields are always set: a
//! `maximumVolumeSize` without `capacity` crashes kube-scheduler 1.37's
//! capacity scoring (a nil dereference in VolumeBinding's Score).
//!
//! The objects follow the ledger within a moment of each change it hears
//! of (a volume made, grown or gone, a class or plugin changed), and are
//! measured again every poll interval otherwise. They are owned by the
//! host's Pod, so they go with it, and a host starting again takes over
//! those of its node and removes those of classes it no longer serves.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};

use super::super::nodes::{OwnNode, HOSTNAME_LABEL};
use super::super::reasons::NODE_CAPACITY;
use super::super::Context;
use super::reported;
use crate::metrics::CapacityLabels;
use crate::provisioner::{Provisioner, PLUGIN_PARAMETER};
use crate::quantity::Bytes;

/// The label saying which node host wrote an object (the node's name, or
/// a digest of a name too long for a label value).
pub const NODE_HOST_LABEL: &str = "wasmprov.io/node-host";
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "wasmprov");
/// How long changes are gathered before the objects are written.
const SETTLE: Duration = Duration::from_millis(200);
/// The wait after a failed write or list before the next attempt.
const RETRY: Duration = Duration::from_secs(5);

/// Where, as whom and how often a node host publishes its capacity.
#[derive(Debug, Clone)]
pub struct Publishing {
    /// The namespace of the objects (the host's own).
    pub namespace: String,
    /// The host's Pod, which owns them; `None` outside a Pod.
    pub owner: Option<OwnerReference>,
    /// How often the disks are measured when nothing else changes.
    pub poll_interval: Duration,
}

/// Why `provisioner` cannot name the `CSIDriver` the scheduler looks up
/// (a DNS subdomain of at most 63 characters), if it cannot.
pub fn driver_name_problem(provisioner: &str) -> Option<String> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if provisioner.len() > 63 {
        return Some(format!(
            "{provisioner:?} is longer than the 63 characters of a CSIDriver name"
        ));
    }
    if !provisioner.split('.').all(label_ok) {
        return Some(format!(
            "{provisioner:?} is not a DNS subdomain (lower-case letters, digits, '-' and '.', \
             no '/'), as a CSIDriver name must be"
        ));
    }
    None
}

/// What one object says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Figures {
    capacity: u64,
    maximum_volume_size: u64,
}

/// What this host has written, and said.
#[derive(Default)]
struct Published {
    /// Objects of this node by name: their class, and what they say
    /// (`None`: found at start, not yet written by this host).
    objects: HashMap<String, (String, Option<Figures>)>,
    /// Whether the objects a previous host of this node left were listed.
    listed: bool,
    /// Warnings given, per class: once each.
    warned: HashSet<(String, String)>,
    /// When the volumes were last measured.
    measured: Option<Instant>,
}

impl Published {
    /// Logs a failed request: a warning the first time it fails so, then
    /// quietly (it is retried every few seconds).
    fn failed(&mut self, message: String) {
        if self.warned.insert((String::new(), message.clone())) {
            tracing::warn!("{message}");
        } else {
            tracing::debug!("{message}");
        }
    }
}

/// Publishes this node's capacity until the lifecycle stops.
pub(in crate::lifecycle) async fn run<P: Provisioner>(
    ctx: Arc<Context<P>>,
    own: OwnNode,
    publishing: Publishing,
) {
    let api: Api<CSIStorageCapacity> = Api::namespaced(ctx.client.clone(), &publishing.namespace);
    let mut published = Published::default();
    let mut plugins = ctx.provisioner.plugins_changed();
    loop {
        let ok = publish_once(&ctx, &own, &publishing, &api, &mut published).await;
        let wait = if ok { publishing.poll_interval } else { RETRY };
        let plugin_loaded = async {
            match plugins.as_mut() {
                Some(rx) => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await
                    }
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = ctx.capacity.changed() => tokio::time::sleep(SETTLE).await,
            () = plugin_loaded => tokio::time::sleep(SETTLE).await,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// One round: measure, write what changed, remove what is no longer
/// served. False if something must be tried again soon.
async fn publish_once<P: Provisioner>(
    ctx: &Context<P>,
    own: &OwnNode,
    publishing: &Publishing,
    api: &Api<CSIStorageCapacity>,
    published: &mut Published,
) -> bool {
    if !published.listed {
        match list_own(api, own).await {
            Ok(found) => {
                published.objects.extend(found);
                published.listed = true;
            }
            Err(e) => {
                published.failed(format!(
                    "cannot list this node's CSIStorageCapacity objects in namespace {}: {e}; \
                     retrying (the node host's Role must allow list, create, patch and delete \
                     of csistoragecapacities: deploy/rbac-node.yaml)",
                    publishing.namespace
                ));
                return false;
            }
        }
    }
    let volumes = ctx.volumes.state();
    if published
        .measured
        .is_none_or(|at| at.elapsed() >= publishing.poll_interval)
    {
        let (ledger, volumes, node) = (ctx.capacity.clone(), volumes.clone(), own.clone());
        let _ = tokio::task::spawn_blocking(move || ledger.measure_written(&volumes, &node)).await;
        published.measured = Some(Instant::now());
    }
    let mut desired = BTreeMap::new();
    let mut node = None;
    for class in ctx.classes.state() {
        if let Some(figures) = figures_for(ctx, own, &mut node, &class, &volumes, published).await {
            let name = class.name_any();
            desired.insert(object_name(own, &name), (name, figures));
        }
    }
    let mut ok = true;
    for (name, (class, figures)) in &desired {
        let current = published.objects.get(name).and_then(|(_, f)| *f);
        if current == Some(*figures) {
            continue;
        }
        let known = published.objects.contains_key(name);
        let object = capacity_object(name, class, own, publishing, figures);
        match write(api, &object, known).await {
            Ok(()) => {
                tracing::debug!(class, node = %own.name, capacity = figures.capacity, "published capacity");
                let labels = labels(class, own);
                let gauge = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
                ctx.metrics
                    .capacity_bytes
                    .get_or_create(&labels)
                    .set(gauge(figures.capacity));
                ctx.metrics
                    .capacity_max_volume_bytes
                    .get_or_create(&labels)
                    .set(gauge(figures.maximum_volume_size));
                published
                    .objects
                    .insert(name.clone(), (class.clone(), Some(*figures)));
            }
            Err(e) => {
                published.failed(format!(
                    "cannot write CSIStorageCapacity {name} (StorageClass {class}): {e}; retrying"
                ));
                ok = false;
            }
        }
    }
    let gone: Vec<String> = (published.objects.keys())
        .filter(|n| !desired.contains_key(*n))
        .cloned()
        .collect();
    for name in gone {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                published.failed(format!(
                    "cannot delete CSIStorageCapacity {name}: {e}; retrying"
                ));
                ok = false;
                continue;
            }
        }
        if let Some((class, _)) = published.objects.remove(&name) {
            let labels = labels(&class, own);
            ctx.metrics.capacity_bytes.remove(&labels);
            ctx.metrics.capacity_max_volume_bytes.remove(&labels);
        }
    }
    ok
}

/// What this node can still give a new volume of `class`, if this host
/// serves the class and can tell: what its plugin reports, if it does,
/// else the host's own figure for the plugin's directory. Warns once about
/// what it cannot tell. `node`: this host's Node, read once a round when a
/// plugin is to be told about it.
async fn figures_for<P: Provisioner>(
    ctx: &Context<P>,
    own: &OwnNode,
    node: &mut Option<Node>,
    class: &StorageClass,
    volumes: &[Arc<k8s_openapi::api::core::v1::PersistentVolume>],
    published: &mut Published,
) -> Option<Figures> {
    if !ctx.config.names.contains(&class.provisioner) {
        return None;
    }
    let plugin = class.parameters.as_ref()?.get(PLUGIN_PARAMETER)?;
    let info = ctx.provisioner.plugin(plugin).ok()?;
    let class_name = class.name_any();
    let mut warn = |message: String| {
        if published
            .warned
            .insert((class_name.clone(), message.clone()))
        {
            tracing::warn!(class = %class_name, node = %own.name, "{message}");
            ctx.events.warning(
                &class.object_ref(&()),
                NODE_CAPACITY,
                "PublishingCapacity",
                message,
            );
        }
    };
    if info.reports_capacity {
        if node.is_none() {
            *node = Some(reported::node_object(
                own,
                reported::read_node(ctx, own).await,
            ));
        }
        let node = node.as_ref()?;
        match reported::reported_room(ctx, plugin, &info, class, node, own).await {
            Ok(Some(figure)) => {
                return Some(Figures {
                    capacity: figure.available_bytes,
                    maximum_volume_size: figure.maximum_volume_bytes,
                })
            }
            Ok(None) => {}
            Err(why) => {
                let instead = if info.storage.is_some() {
                    "the host publishes its own figure for the plugin's directory meanwhile"
                } else {
                    "nothing is published for it meanwhile, so the scheduler puts none of its \
                     pods there"
                };
                warn(format!("{why}; {instead}"));
            }
        }
    }
    let Some(storage) = info.storage else {
        warn(format!(
            "node {}: plugin {plugin} grants no directory the node host can measure, so no \
             capacity is published for StorageClass {class_name} and the scheduler puts none \
             of its pods there: give the plugin one read-write preopen, or name it under \
             plugins.{plugin}.capacity.directory in the sandbox policy",
            own.name
        ));
        return None;
    };
    let room = match ctx.capacity.room(&storage, volumes, own) {
        Ok(room) => room,
        Err(e) => {
            warn(format!(
                "node {}: cannot measure the filesystem of {} for StorageClass {class_name} \
                 (plugin {plugin}): {e}; no capacity is published, so the scheduler puts none \
                 of its pods there: create the directory, or fix the plugin's preopen",
                own.name,
                storage.directory.display()
            ));
            return None;
        }
    };
    if storage.reserve_bytes >= room.disk.free.saturating_add(room.unwritten) {
        warn(format!(
            "node {}: plugins.{plugin}.capacity.reserve ({}) leaves nothing of the {} free in \
             {}, so no volume of StorageClass {class_name} fits there: lower the reserve in \
             the sandbox policy, or give the volumes a larger disk",
            own.name,
            Bytes(storage.reserve_bytes),
            Bytes(room.disk.free),
            storage.directory.display()
        ));
    }
    let left = room.left();
    Some(Figures {
        capacity: left,
        maximum_volume_size: left.min(storage.max_volume_bytes),
    })
}

/// The objects a host of this node wrote before: by name, their class.
async fn list_own(
    api: &Api<CSIStorageCapacity>,
    own: &OwnNode,
) -> Result<HashMap<String, (String, Option<Figures>)>, kube::Error> {
    let selector = format!("{NODE_HOST_LABEL}={}", node_label(own));
    let list = api.list(&ListParams::default().labels(&selector)).await?;
    Ok(list
        .items
        .into_iter()
        .map(|c| (c.name_any(), (c.storage_class_name, None)))
        .collect())
}

/// Creates the object, or updates what may change of it: its figures, and
/// its owner (a new Pod of the host).
async fn write(
    api: &Api<CSIStorageCapacity>,
    object: &CSIStorageCapacity,
    exists: bool,
) -> Result<(), kube::Error> {
    let name = object.name_any();
    let update = serde_json::json!({
        "metadata": {
            "labels": object.metadata.labels,
            "ownerReferences": object.metadata.owner_references,
        },
        "capacity": object.capacity,
        "maximumVolumeSize": object.maximum_volume_size,
    });
    let (params, update) = (PatchParams::default(), Patch::Merge(&update));
    let patch = || api.patch(&name, &params, &update);
    if exists {
        match patch().await {
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            other => return other.map(drop),
        }
    }
    match api.create(&PostParams::default(), object).await {
        Err(kube::Error::Api(e)) if e.code == 409 => patch().await.map(drop),
        other => other.map(drop),
    }
}

fn capacity_object(
    name: &str,
    class: &str,
    own: &OwnNode,
    publishing: &Publishing,
    figures: &Figures,
) -> CSIStorageCapacity {
    CSIStorageCapacity {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(publishing.namespace.clone()),
            labels: Some(BTreeMap::from([
                (NODE_HOST_LABEL.to_owned(), node_label(own)),
                (MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned()),
            ])),
            owner_references: publishing.owner.clone().map(|o| vec![o]),
            ..Default::default()
        },
        storage_class_name: class.to_owned(),
        node_topology: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                HOSTNAME_LABEL.to_owned(),
                own.hostname.clone(),
            )])),
            match_expressions: None,
        }),
        capacity: Some(Quantity(Bytes(figures.capacity).to_string())),
        maximum_volume_size: Some(Quantity(Bytes(figures.maximum_volume_size).to_string())),
    }
}

fn labels(class: &str, own: &OwnNode) -> CapacityLabels {
    CapacityLabels {
        class: class.to_owned(),
        node: own.name.clone(),
    }
}

/// `<node>-<class>-<digest>`: readable, and unique even where two pairs
/// join to the same text; at most 253 characters.
fn object_name(own: &OwnNode, class: &str) -> String {
    let digest = short_digest(&format!("{}\n{class}", own.name));
    let mut readable = format!("{}-{class}", own.name);
    readable.truncate(253 - 1 - digest.len());
    let readable = readable.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{readable}-{digest}")
}

/// The node's name as a label value (at most 63 characters).
fn node_label(own: &OwnNode) -> String {
    if own.name.len() <= 63 {
        own.name.clone()
    } else {
        format!("node-{}", short_digest(&own.name))
    }
}

fn short_digest(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> OwnNode {
        OwnNode {
            name: name.into(),
            hostname: name.into(),
        }
    }

    #[test]
    fn only_a_short_dns_subdomain_can_name_a_csidriver() {
        assert_eq!(driver_name_problem("node.wasmprov.io"), None);
        for bad in ["wasmprov.io/host", "Node.wasmprov.io", "-a.io", "a..io", ""] {
            let problem = driver_name_problem(bad).expect(bad);
            assert!(problem.contains("DNS subdomain"), "{problem}");
        }
        let long = format!("{}.io", "a".repeat(61));
        assert!(driver_name_problem(&long)
            .unwrap()
            .contains("63 characters"));
    }

    #[test]
    fn object_names_are_readable_unique_and_valid() {
        let a = object_name(&node("a-b"), "c");
        let b = object_name(&node("a"), "b-c");
        assert!(
            a.starts_with("a-b-c-") && b.starts_with("a-b-c-"),
            "{a} {b}"
        );
        assert_ne!(a, b);
        let long = object_name(&node(&"n".repeat(253)), &"c".repeat(253));
        assert_eq!(long.len(), 253);
        assert!(long.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
        assert_eq!(node_label(&node(&"n".repeat(64))).len(), 13);
        assert_eq!(node_label(&node("n1")), "n1");
    }
}
