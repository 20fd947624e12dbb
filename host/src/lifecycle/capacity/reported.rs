//! Room a plugin reports itself (its `capacity` hook, contract 0.3), for
//! storage the host cannot measure as well as the plugin (a pool of volumes
//! made in advance, a backend of its own). Nothing of it is published or
//! relied on before it is checked against the filesystem the plugin's
//! volumes are on.
//!
//! A plugin's figure counts the volumes it finished making, not those still
//! being made. So a claim checked against it also counts every volume of
//! the class whose provision was under way at any moment since the plugin
//! was asked: such a volume is in the figure or counted, at worst both (the
//! claim is then sent to another node needlessly, never over-committed).

use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::super::nodes::{OwnNode, HOSTNAME_LABEL};
use super::super::Context;
use super::{disk, Ledger, Promise, Refusal};
use crate::provisioner::{NodeStorage, PluginInfo, Provisioner, ReportedCapacity};
use crate::quantity::Bytes;

/// Volumes being made against plugins' figures, and the figures being
/// asked for.
#[derive(Debug, Default)]
pub(super) struct Flights {
    flights: Vec<Flight>,
    /// When each question still unanswered was asked, by ticket.
    asking: Vec<(u64, Instant)>,
    next_ticket: u64,
}

#[derive(Debug)]
struct Flight {
    class: String,
    pv: String,
    bytes: u64,
    /// When its provision ended; `None`: under way.
    landed: Option<Instant>,
}

impl Flights {
    /// Forgets the volumes that landed before every question still
    /// unanswered was asked: each answer to come counts them.
    fn prune(&mut self) {
        let oldest = self.asking.iter().map(|(_, at)| *at).min();
        self.flights
            .retain(|f| f.landed.is_none_or(|at| oldest.is_some_and(|o| at > o)));
    }

    /// What volumes of `class` (other than `pv`) take from a figure asked
    /// for at `asked`.
    fn counted(&self, class: &str, pv: &str, asked: Instant) -> (u64, usize) {
        self.flights
            .iter()
            .filter(|f| f.class == class && f.pv != pv)
            .filter(|f| f.landed.is_none_or(|at| at > asked))
            .fold((0, 0), |(bytes, n), f| {
                (bytes.saturating_add(f.bytes), n + 1)
            })
    }
}

/// A question to `plugin` about its room for `class`, from when it was
/// asked until dropped.
#[derive(Debug)]
pub(super) struct Asking<'a> {
    ledger: &'a Ledger,
    ticket: u64,
    at: Instant,
    plugin: String,
    class: String,
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        let mut flights = super::super::lock(&self.ledger.reported);
        flights.asking.retain(|(t, _)| *t != self.ticket);
        flights.prune();
    }
}

impl Ledger {
    /// Marks the moment `plugin` is asked for its figure for `class`.
    pub(super) fn asking(&self, plugin: &str, class: &str) -> Asking<'_> {
        let mut flights = super::super::lock(&self.reported);
        let ticket = flights.next_ticket;
        flights.next_ticket += 1;
        let at = Instant::now();
        flights.asking.push((ticket, at));
        Asking {
            ledger: self,
            ticket,
            at,
            plugin: plugin.to_owned(),
            class: class.to_owned(),
        }
    }

    /// Promises `bytes` of the room `figure` the plugin gave when `asking`
    /// to volume `pv`, if they fit with the volumes in flight. Held until
    /// the [`Promise`] is dropped: the plugin's next figure counts the
    /// volume.
    pub(super) fn promise_reported(
        &self,
        asking: &Asking<'_>,
        pv: &str,
        bytes: u64,
        figure: &ReportedCapacity,
        own: &OwnNode,
    ) -> Result<Promise<'_>, Refusal> {
        let (class, plugin) = (asking.class.as_str(), asking.plugin.as_str());
        let mut flights = super::super::lock(&self.reported);
        let (in_flight, volumes) = flights.counted(class, pv, asking.at);
        let left = figure.available_bytes.saturating_sub(in_flight);
        if bytes > left.min(figure.maximum_volume_bytes) {
            return Err(Refusal::NoRoom(format!(
                "node {} cannot hold {} for StorageClass {class}: plugin {plugin} reports {} \
                 available there (largest volume {}), less {} for {volumes} volume(s) being \
                 made",
                own.name,
                Bytes(bytes),
                Bytes(figure.available_bytes),
                Bytes(figure.maximum_volume_bytes),
                Bytes(in_flight),
            )));
        }
        flights.flights.retain(|f| f.pv != pv);
        flights.flights.push(Flight {
            class: class.to_owned(),
            pv: pv.to_owned(),
            bytes,
            landed: None,
        });
        drop(flights);
        self.touch();
        Ok(Promise {
            ledger: self,
            pv: pv.to_owned(),
            kind: super::PromiseKind::Reported,
        })
    }

    /// The provision of `pv` ended: a figure asked for from now on counts
    /// what it made.
    pub(super) fn landed(&self, pv: &str) {
        let mut flights = super::super::lock(&self.reported);
        let now = Instant::now();
        for f in flights.flights.iter_mut().filter(|f| f.pv == pv) {
            f.landed.get_or_insert(now);
        }
        flights.prune();
        drop(flights);
        self.touch();
    }
}

/// Node mode: the room `plugin` reports on this node for `class`, checked;
/// `Ok(None)` when it does not report one (or says it knows no better), so
/// the host's own figure applies.
pub(super) async fn reported_room<P: Provisioner>(
    ctx: &Context<P>,
    plugin: &str,
    info: &PluginInfo,
    class: &StorageClass,
    node: &Node,
    own: &OwnNode,
) -> Result<Option<ReportedCapacity>, String> {
    if !info.reports_capacity {
        return Ok(None);
    }
    let Some(figure) = ctx.provisioner.capacity(plugin, class, node).await? else {
        return Ok(None);
    };
    let storage = info.storage.as_ref();
    let storage = storage.map(|s| (s, disk::measure(&s.directory)));
    check(figure, storage, plugin, &class.name_any(), own).map(Some)
}

/// Refuses a figure larger than the filesystem the plugin's volumes are on.
fn check(
    figure: ReportedCapacity,
    storage: Option<(&NodeStorage, std::io::Result<disk::Disk>)>,
    plugin: &str,
    class: &str,
    own: &OwnNode,
) -> Result<ReportedCapacity, String> {
    let Some((storage, measured)) = storage else {
        return Ok(figure);
    };
    let directory = storage.directory.display();
    let disk = measured.map_err(|e| {
        format!(
            "cannot check the capacity plugin {plugin} reports for StorageClass {class} on \
             node {}: the filesystem of {directory} cannot be measured: {e}",
            own.name
        )
    })?;
    if figure.available_bytes > disk.size {
        return Err(format!(
            "plugin {plugin} reported {} available for StorageClass {class} on node {}, more \
             than the whole filesystem of {directory} ({}); this is a bug in the plugin",
            Bytes(figure.available_bytes),
            own.name,
            Bytes(disk.size)
        ));
    }
    Ok(figure)
}

/// The Node object a plugin is told about: the one read from the API if
/// there is one, else what the host knows of its node.
pub(super) fn node_object(own: &OwnNode, read: Option<Node>) -> Node {
    read.unwrap_or_else(|| Node {
        metadata: ObjectMeta {
            name: Some(own.name.clone()),
            labels: Some([(HOSTNAME_LABEL.to_owned(), own.hostname.clone())].into()),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// Reads this host's Node (its labels go to the plugin); `None` if it
/// cannot be read.
pub(super) async fn read_node<P>(ctx: &Context<P>, own: &OwnNode) -> Option<Node> {
    let api = kube::Api::<Node>::all(ctx.client.clone());
    match api.get_opt(&own.name).await {
        Ok(found) => found,
        Err(e) => {
            tracing::debug!(node = %own.name, "cannot read this node for its plugins' capacity: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::own;
    use super::*;

    fn figure(available: u64, maximum: u64) -> ReportedCapacity {
        ReportedCapacity {
            available_bytes: available,
            maximum_volume_bytes: maximum,
        }
    }

    #[test]
    fn volumes_in_flight_count_until_a_figure_asked_after_they_landed() {
        let ledger = Ledger::default();
        let fig = figure(10, 10);
        let first = ledger.asking("p", "c");
        let a = ledger
            .promise_reported(&first, "a", 6, &fig, &own())
            .unwrap();
        // The same figure cannot be promised twice.
        let refused = ledger.promise_reported(&first, "b", 6, &fig, &own());
        let Err(Refusal::NoRoom(why)) = refused else {
            panic!("{refused:?}")
        };
        assert!(why.contains("less 6 for 1 volume(s) being made"), "{why}");
        // Another class's figure is its own.
        let other_class = ledger.asking("p", "d");
        let other = ledger.promise_reported(&other_class, "b", 6, &fig, &own());
        assert!(other.is_ok());
        drop((other, other_class));
        // `a` lands while the next figure is being asked for: that figure
        // may not count it yet, so `a` still counts against it.
        let second = ledger.asking("p", "c");
        drop(a);
        assert!(ledger
            .promise_reported(&second, "b", 6, &fig, &own())
            .is_err());
        // A figure asked for after `a` landed counts it itself.
        let third = ledger.asking("p", "c");
        assert!(ledger
            .promise_reported(&third, "b", 6, &fig, &own())
            .is_ok());
        drop((first, second, third));
        assert!(super::super::super::lock(&ledger.reported)
            .flights
            .is_empty());
    }

    #[test]
    fn a_volume_larger_than_the_largest_reported_is_refused() {
        let ledger = Ledger::default();
        let asking = ledger.asking("p", "c");
        let refused = ledger.promise_reported(&asking, "a", 6, &figure(10, 5), &own());
        assert!(matches!(refused, Err(Refusal::NoRoom(_))));
    }

    #[test]
    fn a_figure_above_the_filesystem_is_a_bug_of_the_plugin() {
        let dir = tempfile::tempdir().unwrap();
        let storage = NodeStorage {
            directory: dir.path().to_owned(),
            reserve_bytes: 0,
            max_volume_bytes: u64::MAX,
        };
        let size = disk::measure(dir.path()).unwrap().size;
        let fits = figure(size, size);
        let measured = || Some((&storage, disk::measure(dir.path())));
        assert_eq!(check(fits, measured(), "p", "c", &own()), Ok(fits));
        let why = check(figure(size + 1, 1), measured(), "p", "c", &own()).unwrap_err();
        assert!(
            why.contains("more than the whole filesystem") && why.contains("bug in the plugin"),
            "{why}"
        );
        // Nothing to check against: a backend of the plugin's own.
        assert!(check(figure(size + 1, 1), None, "p", "c", &own()).is_ok());
    }
}
