//! Built-in controllers (the kube-controller-manager loops a provisioner
//! relies on). Each runs as its own task fed by the store's change feed, with
//! a periodic resync, and writes through the registry like any client.

pub mod events;
mod namespace;
mod protection;
mod provisioning;
pub mod pv;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinSet;

use crate::faults::Faults;
use crate::objects;
use crate::registry::Registry;
use crate::resources::{NAMESPACE, POD, PV, PVC};
use crate::store::{Event, EventType};

/// Which built-in controllers run.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// PV binder: claimRef binding, static matching, Released/Lost/Failed phases.
    pub pv_binder: bool,
    /// Storage-provisioner annotations and the `ExternalProvisioning` event on pending claims.
    pub provisioner_annotations: bool,
    /// pvc-protection / pv-protection finalizers (admission adds, controllers remove).
    pub protection: bool,
    /// Namespace deletion (empties a terminating namespace, then removes it).
    pub namespace: bool,
    /// Full resync period (the real PV controller uses 15 s).
    pub resync: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            pv_binder: true,
            provisioner_annotations: true,
            protection: true,
            namespace: true,
            resync: Duration::from_secs(15),
        }
    }
}

trait Reconciler: Send + Sync + 'static {
    fn on_event(&self, e: &Event);
    fn resync(&self);
}

impl Reconciler for pv::PvController {
    fn on_event(&self, e: &Event) {
        if e.resource != PV && e.resource != PVC {
            return;
        }
        if e.resource == PVC && e.kind == EventType::Deleted {
            // Volumes pre-bound to a claim that never bound have no volumeName to follow.
            self.sync_volumes_for_claim(&e.object);
        }
        for (res, ns, name) in pv::affected(e.resource, &e.object, e.prev.as_deref()) {
            if res == PV {
                self.sync_volume(&name);
            } else {
                self.sync_claim(&ns, &name);
            }
        }
    }
    fn resync(&self) {
        pv::PvController::resync(self)
    }
}

impl Reconciler for protection::Protection {
    fn on_event(&self, e: &Event) {
        match e.resource {
            PVC => self.sync_claim(objects::namespace(&e.object), objects::name(&e.object)),
            PV => self.sync_volume(objects::name(&e.object)),
            POD => {
                self.sync_pod(&e.object);
                if let Some(p) = &e.prev {
                    self.sync_pod(p);
                }
            }
            _ => {}
        }
    }
    fn resync(&self) {
        protection::Protection::resync(self)
    }
}

impl Reconciler for namespace::NamespaceController {
    fn on_event(&self, e: &Event) {
        if e.resource == NAMESPACE {
            self.sync(objects::name(&e.object));
        } else if e.kind == EventType::Deleted && !objects::namespace(&e.object).is_empty() {
            self.sync(objects::namespace(&e.object));
        }
    }
    fn resync(&self) {
        namespace::NamespaceController::resync(self)
    }
}

async fn run<R: Reconciler>(registry: Arc<Registry>, faults: Faults, r: R, resync: Duration) {
    let mut feed = registry.store.subscribe();
    faults.wait_unpaused().await;
    r.resync();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + resync, resync);
    loop {
        // None: resync (periodic, or after falling behind the feed).
        let work = tokio::select! {
            e = feed.recv() => match e {
                Ok(e) => Some(e),
                Err(RecvError::Lagged(_)) => None,
                Err(RecvError::Closed) => return,
            },
            _ = tick.tick() => None,
        };
        // A paused API server stops its controllers too: they can neither read nor write.
        faults.wait_unpaused().await;
        match work {
            Some(e) => r.on_event(&e),
            None => r.resync(),
        }
    }
}

pub fn spawn(
    registry: &Arc<Registry>,
    faults: &Faults,
    cfg: &ControllerConfig,
    tasks: &mut JoinSet<()>,
) {
    if cfg.pv_binder || cfg.provisioner_annotations {
        let c = pv::PvController::new(registry.clone(), cfg.pv_binder, cfg.provisioner_annotations);
        tasks.spawn(run(registry.clone(), faults.clone(), c, cfg.resync));
    }
    if cfg.protection {
        tasks.spawn(run(
            registry.clone(),
            faults.clone(),
            protection::Protection::new(registry.clone()),
            cfg.resync,
        ));
    }
    if cfg.namespace {
        tasks.spawn(run(
            registry.clone(),
            faults.clone(),
            namespace::NamespaceController::new(registry.clone()),
            cfg.resync,
        ));
    }
}
