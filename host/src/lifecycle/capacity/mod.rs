//! A node's room for volumes: what a node host tells the scheduler
//! ([`publish`]: one CSIStorageCapacity per class it serves) and checks
//! before it makes or grows a volume, so that no byte of its node's disk
//! is promised twice.
//!
//! For a plugin's storage (a directory on the node, [`NodeStorage`]):
//!
//! ```text
//! left = free − reserve − (promised − written)
//! ```
//!
//! `free` is the filesystem's free space, as an unprivileged user sees it
//! ([`disk`]); `reserve` is what the operator keeps free
//! (`plugins.<name>.capacity.reserve`); `promised` is the size of every
//! volume pinned to this node whose path is on that filesystem (whoever
//! made it), and of the volumes being made or grown there now; `written`
//! is what those volumes already hold (up to their size), as last
//! measured ([`Ledger::measure_written`]; nothing until then). Whatever
//! else is on the filesystem is already out of `free`. A volume's size is
//! no quota: a volume written past its size takes what others were
//! promised, which `free` then shows.
//!
//! A plugin that knows better (it exports `capacity`, contract 0.3) gives
//! the figure for its classes instead, checked first ([`reported`]).

pub mod disk;
pub mod publish;
mod reported;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;

use super::nodes::{self, OwnNode};
use super::Context;
use crate::provisioner::{
    NodeStorage, PluginInfo, ProvisionError, ProvisionState, Provisioner, ResizeError, ResizeState,
};
use crate::quantity::{self, Bytes};
use disk::Disk;

/// How long a reservation outlives its provision when no volume shows up
/// (the host saved it, but the volume watch never delivered it).
const RESERVATION_TTL: Duration = Duration::from_secs(300);

/// What this node host has promised and is promising.
#[derive(Debug, Default)]
pub struct Ledger {
    /// The sizes of volumes being made or grown, by PersistentVolume name,
    /// until the volume watch shows them at that size.
    reservations: Mutex<HashMap<String, Reservation>>,
    /// What each volume held when last measured, by PersistentVolume name.
    written: Mutex<HashMap<String, u64>>,
    /// Volumes being made against the room their plugins report.
    reported: Mutex<reported::Flights>,
    /// Woken whenever what is promised may have changed.
    changed: tokio::sync::Notify,
}

#[derive(Debug, Clone, Copy)]
struct Reservation {
    device: u64,
    bytes: u64,
    since: Instant,
}

/// Room promised to a volume under way: let go when dropped, unless
/// [`Promise::keep`] says the volume now holds it.
#[must_use = "the room is let go again when the promise is dropped"]
#[derive(Debug)]
pub struct Promise<'a> {
    ledger: &'a Ledger,
    pv: String,
    kind: PromiseKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PromiseKind {
    /// Room on the disk the host measures; `kept`: the volume holds it now.
    Disk { kept: bool },
    /// Room its plugin reports: counted until the plugin's next figure
    /// counts the volume itself.
    Reported,
}

impl Promise<'_> {
    /// The volume was made (or grew): room on the disk stays counted until
    /// the volume watch shows it at that size; room a plugin reports is
    /// its own to count from now on.
    pub fn keep(mut self) {
        if let PromiseKind::Disk { kept } = &mut self.kind {
            *kept = true;
        }
    }
}

impl Drop for Promise<'_> {
    fn drop(&mut self) {
        match self.kind {
            PromiseKind::Disk { kept: false } => self.ledger.release(&self.pv),
            PromiseKind::Disk { kept: true } => {}
            PromiseKind::Reported => self.ledger.landed(&self.pv),
        }
    }
}

/// Why a volume was not promised room.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// It does not fit: what is left, and how that came about.
    #[error("{0}")]
    NoRoom(String),
    /// The filesystem could not be measured.
    #[error("{0}")]
    Unmeasurable(String),
}

/// The room of one storage on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Room {
    pub disk: Disk,
    pub reserve: u64,
    /// What volumes on it were promised, and what of that is not written
    /// yet (still to come out of `free`).
    pub promised: u64,
    pub unwritten: u64,
    /// How many volumes (made, or under way) `promised` is for.
    pub volumes: usize,
}

impl Room {
    /// What a new volume may still take.
    pub fn left(&self) -> u64 {
        (self.disk.free)
            .saturating_sub(self.reserve)
            .saturating_sub(self.unwritten)
    }

    /// How the figure came about, for events and logs.
    pub fn explain(&self) -> String {
        format!(
            "{} left = {} free - reserve {} - {} of the {} promised to {} volume(s) not yet written",
            Bytes(self.left()),
            Bytes(self.disk.free),
            Bytes(self.reserve),
            Bytes(self.unwritten),
            Bytes(self.promised),
            self.volumes,
        )
    }
}

impl Ledger {
    /// The room of `storage` on `own`, given the cluster's `volumes`.
    pub fn room(
        &self,
        storage: &NodeStorage,
        volumes: &[Arc<PersistentVolume>],
        own: &OwnNode,
    ) -> std::io::Result<Room> {
        let mut reservations = super::lock(&self.reservations);
        let written = super::lock(&self.written);
        room_of(&mut reservations, &written, storage, volumes, own, None)
    }

    /// Promises `bytes` on `storage` to volume `pv` (a new one, or one
    /// growing to that size), if they fit; else says why not, naming
    /// `plugin`'s reserve. Held until the volume watch shows `pv` at that
    /// size if the [`Promise`] is kept, else until it is dropped.
    pub fn reserve(
        &self,
        pv: &str,
        bytes: u64,
        plugin: &str,
        storage: &NodeStorage,
        volumes: &[Arc<PersistentVolume>],
        own: &OwnNode,
    ) -> Result<Promise<'_>, Refusal> {
        let mut reservations = super::lock(&self.reservations);
        let written = super::lock(&self.written);
        let room =
            room_of(&mut reservations, &written, storage, volumes, own, Some(pv)).map_err(|e| {
                Refusal::Unmeasurable(format!(
                    "cannot measure the filesystem of {} on node {} for plugin {plugin}: {e}; \
                     check that the directory exists and the host may read it",
                    storage.directory.display(),
                    own.name
                ))
            })?;
        if bytes > room.left() {
            return Err(Refusal::NoRoom(format!(
                "node {} cannot hold {} in {}: {} (plugins.{plugin}.capacity.reserve in the \
                 sandbox policy)",
                own.name,
                Bytes(bytes),
                storage.directory.display(),
                room.explain(),
            )));
        }
        reservations.insert(
            pv.to_owned(),
            Reservation {
                device: room.disk.device,
                bytes,
                since: Instant::now(),
            },
        );
        drop((reservations, written));
        self.touch();
        Ok(Promise {
            ledger: self,
            pv: pv.to_owned(),
            kind: PromiseKind::Disk { kept: false },
        })
    }

    /// Forgets what was promised to `pv` (its provision or growth failed).
    fn release(&self, pv: &str) {
        if super::lock(&self.reservations).remove(pv).is_some() {
            self.touch();
        }
    }

    /// Measures what each volume pinned to this node holds (a walk of its
    /// directory, [`disk::usage`]: call it off the async threads), so that
    /// only what volumes have yet to write is kept free for them.
    pub fn measure_written(&self, volumes: &[Arc<PersistentVolume>], own: &OwnNode) {
        let measured = volumes
            .iter()
            .filter(|pv| nodes::volume_is_here(pv, Some(own)))
            .filter_map(|pv| Some((pv.name_any(), disk::usage(local_path(pv)?))))
            .collect();
        *super::lock(&self.written) = measured;
    }

    /// Says that what is promised may have changed (a volume came, grew or
    /// went), so that the published figures follow.
    pub fn touch(&self) {
        self.changed.notify_one();
    }

    /// Returns after the next [`Ledger::touch`] (or at once, if one came
    /// since the last call).
    pub async fn changed(&self) {
        self.changed.notified().await;
    }
}

/// Node mode: promises the size `claim` asks for on this node to its
/// volume `pv`, or answers `reschedule` saying why it does not fit (the
/// scheduler then picks another node). The room is what `plugin` reports
/// for `class` if it does, else the host's own figure for its disk. `None`:
/// nothing to promise (a central host, or storage nobody can measure).
pub(super) async fn promise_room<'a, P: Provisioner>(
    claim: &PersistentVolumeClaim,
    pv: &str,
    plugin: &str,
    info: &PluginInfo,
    class: &StorageClass,
    selected_node: Option<&Node>,
    ctx: &'a Context<P>,
) -> Result<Option<Promise<'a>>, ProvisionError> {
    let Some(own) = &ctx.config.node else {
        return Ok(None);
    };
    let requests = claim.spec.as_ref().and_then(|s| s.resources.as_ref());
    let bytes = quantity::storage_of(requests.and_then(|r| r.requests.as_ref())).unwrap_or(0);
    let refused = |refusal| match refusal {
        Refusal::NoRoom(why) => ProvisionError::new(
            ProvisionState::Reschedule,
            format!("{why}; asking the scheduler for another node"),
        ),
        Refusal::Unmeasurable(why) => ProvisionError::new(ProvisionState::Failed, why),
    };
    if info.reports_capacity {
        let class_name = class.name_any();
        let asking = ctx.capacity.asking(plugin, &class_name);
        let node = reported::node_object(own, selected_node.cloned());
        match reported::reported_room(ctx, plugin, info, class, &node, own).await {
            Ok(Some(figure)) => {
                return (ctx.capacity)
                    .promise_reported(&asking, pv, bytes, &figure, own)
                    .map(Some)
                    .map_err(refused);
            }
            Ok(None) => {}
            Err(why) => tracing::warn!(
                class = %class_name,
                "{why}; checking claim {} against the host's own figure instead",
                claim.name_any()
            ),
        }
    }
    let Some(storage) = &info.storage else {
        return Ok(None);
    };
    ctx.capacity
        .reserve(pv, bytes, plugin, storage, &ctx.volumes.state(), own)
        .map(Some)
        .map_err(refused)
}

/// Node mode: promises volume `pv` its new size `bytes` on this node's
/// disk before its plugin grows it, or refuses the growth as infeasible.
pub(super) fn promise_growth<'a, P>(
    pv: &str,
    bytes: u64,
    plugin: &str,
    info: &PluginInfo,
    ctx: &'a Context<P>,
) -> Result<Option<Promise<'a>>, ResizeError> {
    let (Some(own), Some(storage)) = (&ctx.config.node, &info.storage) else {
        return Ok(None);
    };
    match ctx
        .capacity
        .reserve(pv, bytes, plugin, storage, &ctx.volumes.state(), own)
    {
        Ok(promise) => Ok(Some(promise)),
        Err(Refusal::NoRoom(why)) => Err(ResizeError::new(
            ResizeState::Infeasible,
            format!("{why}; ask for less, or move the data to a larger volume on another node"),
        )),
        Err(Refusal::Unmeasurable(why)) => Err(ResizeError::new(ResizeState::Failed, why)),
    }
}

/// [`Ledger::room`], leaving out volume `except` (one that is growing, or
/// being made again): the reservations held and the volumes are read
/// together, and reservations the volumes now show are let go.
fn room_of(
    reservations: &mut HashMap<String, Reservation>,
    written: &HashMap<String, u64>,
    storage: &NodeStorage,
    volumes: &[Arc<PersistentVolume>],
    own: &OwnNode,
    except: Option<&str>,
) -> std::io::Result<Room> {
    let disk = disk::measure(&storage.directory)?;
    let mut room = Room {
        disk,
        reserve: storage.reserve_bytes,
        promised: 0,
        unwritten: 0,
        volumes: 0,
    };
    let promise = |room: &mut Room, name: &str, bytes: u64| {
        let held = written.get(name).copied().unwrap_or(0).min(bytes);
        room.promised = room.promised.saturating_add(bytes);
        room.unwritten = room.unwritten.saturating_add(bytes - held);
        room.volumes += 1;
    };
    let mut seen = std::collections::HashSet::new();
    for pv in volumes.iter().filter(|pv| on_disk(pv, storage, &disk, own)) {
        let name = pv.name_any();
        let size =
            quantity::storage_of(pv.spec.as_ref().and_then(|s| s.capacity.as_ref())).unwrap_or(0);
        if reservations.get(&name).is_some_and(|r| size >= r.bytes) {
            reservations.remove(&name);
        }
        let reserved = reservations.get(&name).map_or(0, |r| r.bytes);
        if except != Some(name.as_str()) {
            promise(&mut room, &name, size.max(reserved));
        }
        seen.insert(name);
    }
    reservations.retain(|_, r| r.since.elapsed() < RESERVATION_TTL);
    for (name, r) in reservations.iter() {
        if r.device == disk.device && !seen.contains(name) && except != Some(name.as_str()) {
            promise(&mut room, name, r.bytes);
        }
    }
    Ok(room)
}

/// Whether `pv` is pinned to this node with its storage on `disk`: in the
/// storage's directory, or elsewhere on the same filesystem.
fn on_disk(pv: &PersistentVolume, storage: &NodeStorage, disk: &Disk, own: &OwnNode) -> bool {
    nodes::volume_is_here(pv, Some(own))
        && local_path(pv).is_some_and(|path| {
            path.starts_with(&storage.directory) || disk::device_of(path) == Some(disk.device)
        })
}

/// Where a node-local volume's storage is on its node.
fn local_path(pv: &PersistentVolume) -> Option<&Path> {
    let spec = pv.spec.as_ref()?;
    let path = match (&spec.host_path, &spec.local) {
        (Some(h), _) => &h.path,
        (None, Some(l)) => &l.path,
        (None, None) => return None,
    };
    Some(Path::new(path))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use serde_json::json;

    /// The node of the tests' host.
    pub(in crate::lifecycle::capacity) fn own() -> OwnNode {
        OwnNode {
            name: "n1".into(),
            hostname: "n1".into(),
        }
    }

    fn volume(name: &str, node: &str, path: &Path, size: &str) -> Arc<PersistentVolume> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": size},
                    "hostPath": {"path": path},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                    ]}]}},
                },
            }))
            .unwrap(),
        )
    }

    fn storage(dir: &Path, reserve: u64) -> NodeStorage {
        NodeStorage {
            directory: dir.to_owned(),
            reserve_bytes: reserve,
            max_volume_bytes: u64::MAX,
        }
    }

    #[test]
    fn volumes_on_this_node_and_disk_are_promised_and_others_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = Path::new("/nonexistent/wasmprov-capacity-test");
        let volumes = [
            volume("a", "n1", &dir.path().join("a"), "1Mi"),
            volume("b", "n1", &dir.path().join("b"), "2Mi"),
            volume("other-node", "n2", &dir.path().join("c"), "4Mi"),
            volume("other-disk", "n1", elsewhere, "8Mi"),
        ];
        let ledger = Ledger::default();
        let room = ledger
            .room(&storage(dir.path(), 1 << 20), &volumes, &own())
            .unwrap();
        assert_eq!((room.promised, room.volumes), (3 << 20, 2));
        assert_eq!(room.reserve, 1 << 20);
        assert_eq!(room.unwritten, 3 << 20);
        assert_eq!(
            room.left(),
            room.disk.free - (4 << 20),
            "{}",
            room.explain()
        );
        // What the volumes hold is no longer to come out of `free`.
        std::fs::create_dir(dir.path().join("a")).unwrap();
        std::fs::write(dir.path().join("a/data"), vec![1u8; 1 << 20]).unwrap();
        ledger.measure_written(&volumes, &own());
        let room = ledger
            .room(&storage(dir.path(), 1 << 20), &volumes, &own())
            .unwrap();
        assert_eq!((room.promised, room.unwritten), (3 << 20, 2 << 20));
    }

    #[test]
    fn a_reservation_counts_until_the_volume_shows_at_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let storage = storage(dir.path(), 0);
        let ledger = Ledger::default();
        let path = dir.path().join("v");
        ledger
            .reserve("v", 3 << 20, "p", &storage, &[], &own())
            .unwrap()
            .keep();
        let before = ledger.room(&storage, &[], &own()).unwrap();
        assert_eq!((before.promised, before.volumes), (3 << 20, 1));
        // Saved at 1Mi less than asked (a plugin may round): still 3Mi
        // until the watch shows it at 3Mi.
        let small = [volume("v", "n1", &path, "1Mi")];
        assert_eq!(
            ledger.room(&storage, &small, &own()).unwrap().promised,
            3 << 20
        );
        let saved = [volume("v", "n1", &path, "3Mi")];
        assert_eq!(
            ledger.room(&storage, &saved, &own()).unwrap().promised,
            3 << 20
        );
        assert!(super::super::lock(&ledger.reservations).is_empty());
        // Growing it to 5Mi is checked without its current 3Mi; a growth
        // that fails lets the 2Mi more go.
        let growing = ledger
            .reserve("v", 5 << 20, "p", &storage, &saved, &own())
            .unwrap();
        assert_eq!(
            ledger.room(&storage, &saved, &own()).unwrap().promised,
            5 << 20
        );
        drop(growing);
        assert_eq!(
            ledger.room(&storage, &saved, &own()).unwrap().promised,
            3 << 20
        );
    }

    #[test]
    fn what_does_not_fit_is_rescheduled_saying_why() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::default();
        let room = ledger.room(&storage(dir.path(), 0), &[], &own()).unwrap();
        // Half of what is left, twice, fits; a third time does not.
        let half = room.left() / 2;
        let storage = storage(dir.path(), 0);
        let _a = ledger
            .reserve("a", half, "p", &storage, &[], &own())
            .unwrap();
        let _b = ledger
            .reserve("b", half, "p", &storage, &[], &own())
            .unwrap();
        let Err(Refusal::NoRoom(refused)) = ledger.reserve("c", half, "p", &storage, &[], &own())
        else {
            panic!("a third half fits");
        };
        for says in [
            "node n1 cannot hold",
            "plugins.p.capacity.reserve",
            "2 volume(s)",
        ] {
            assert!(refused.contains(says), "{refused}");
        }
        // A reserve above the disk leaves nothing.
        let greedy = NodeStorage {
            reserve_bytes: u64::MAX,
            ..storage.clone()
        };
        assert_eq!(ledger.room(&greedy, &[], &own()).unwrap().left(), 0);
        let missing = NodeStorage {
            directory: dir.path().join("missing"),
            ..storage
        };
        let failed = ledger
            .reserve("d", 1, "p", &missing, &[], &own())
            .unwrap_err();
        assert!(
            matches!(&failed, Refusal::Unmeasurable(m) if m.contains("cannot measure")),
            "{failed}"
        );
    }
}
