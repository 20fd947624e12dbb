//! Prometheus metrics. The provisioning metrics keep the Go library's names
//! and labels so existing dashboards and alerts work; plugin metrics are ours.
//! One registry per host (no global state).

use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabels {
    pub class: String,
}

/// The Go library's provisioning labels: the claim's class, and the kind of
/// its data source (`VolumeSnapshot`, `PersistentVolumeClaim`, … or empty).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProvisionLabels {
    pub class: String,
    pub source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginCallLabels {
    pub plugin: String,
    /// `provision` or `delete`.
    pub call: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginResultLabels {
    pub plugin: String,
    pub call: String,
    /// `ok`, or the failure kind (`failed`, `in-background`, `timeout`…).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReloadLabels {
    pub plugin: String,
    /// `loaded`, `rejected` or `removed`.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginVersionLabels {
    pub plugin: String,
    /// `sha256:<hex>` of the component serving the plugin's classes.
    pub digest: String,
}

type ClassCounter = Family<ClassLabels, Counter>;
type ClassHistogram = Family<ClassLabels, Histogram, fn() -> Histogram>;
type ProvisionCounter = Family<ProvisionLabels, Counter>;
type ProvisionHistogram = Family<ProvisionLabels, Histogram, fn() -> Histogram>;

/// Every metric the host exports.
pub struct Metrics {
    registry: Registry,
    pub provision_total: ProvisionCounter,
    pub provision_failed_total: ProvisionCounter,
    pub provision_duration: ProvisionHistogram,
    pub delete_total: ClassCounter,
    pub delete_failed_total: ClassCounter,
    pub delete_duration: ClassHistogram,
    pub resize_total: ClassCounter,
    pub resize_failed_total: ClassCounter,
    pub resize_duration: ClassHistogram,
    pub plugin_calls: Family<PluginResultLabels, Counter>,
    pub plugin_call_duration: Family<PluginCallLabels, Histogram, fn() -> Histogram>,
    /// 1 while this instance holds the leader lease (or runs without election).
    pub leader: Gauge,
    /// New plugin versions seen, by outcome.
    pub plugin_reloads: Family<ReloadLabels, Counter>,
    /// 1 for the version each plugin serves; no series once it is removed.
    pub plugin_info: Family<PluginVersionLabels, Gauge>,
    /// Sandbox policy file changes, by result (`loaded`, `rejected`).
    pub policy_reloads: Family<ResultLabels, Counter>,
    /// Volumes whose finalizer the host stopped writing because another
    /// controller kept undoing it.
    pub volume_finalizer_conflicts: ClassCounter,
    /// Granted directories refusing new volumes, by plugin (`policy::output`).
    pub unusable_grants: Family<PluginLabels, Gauge>,
    /// Released volumes kept because the node their storage is on is gone
    /// (the node hosts' janitor), by class.
    pub volumes_on_gone_nodes: Family<ClassLabels, Gauge>,
    /// What a new volume of a class may still take on a node, as its node
    /// host publishes it (CSIStorageCapacity `capacity`).
    pub capacity_bytes: Family<CapacityLabels, Gauge>,
    /// The largest volume of a class a node takes now (`maximumVolumeSize`).
    pub capacity_max_volume_bytes: Family<CapacityLabels, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CapacityLabels {
    pub class: String,
    pub node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

fn latency_buckets() -> Histogram {
    // 1 ms … ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

/// Prometheus's default buckets (client_golang `DefBuckets`), which the Go
/// library's provisioning histograms use: dashboards compare bucket by bucket.
fn go_library_buckets() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let controller = registry.sub_registry_with_prefix("controller");
        // Names, labels, help and buckets as the Go library's.
        let provision_total = ProvisionCounter::default();
        controller.register(
            "persistentvolumeclaim_provision",
            "Total number of persistent volumes provisioned successfully. Broken down by storage class name and source of the claim.",
            provision_total.clone(),
        );
        let provision_failed_total = ProvisionCounter::default();
        controller.register(
            "persistentvolumeclaim_provision_failed",
            "Total number of persistent volume provision failed attempts. Broken down by storage class name and source of the claim.",
            provision_failed_total.clone(),
        );
        let provision_duration = ProvisionHistogram::new_with_constructor(go_library_buckets);
        controller.register(
            "persistentvolumeclaim_provision_duration_seconds",
            "Latency in seconds to provision persistent volumes. Failed provisioning attempts are ignored. Broken down by storage class name and source of the claim.",
            provision_duration.clone(),
        );
        let delete_total = ClassCounter::default();
        controller.register(
            "persistentvolume_delete",
            "Total number of persistent volumes deleted successfully. Broken down by storage class name.",
            delete_total.clone(),
        );
        let delete_failed_total = ClassCounter::default();
        controller.register(
            "persistentvolume_delete_failed",
            "Total number of persistent volume delete failed attempts. Broken down by storage class name.",
            delete_failed_total.clone(),
        );
        let delete_duration = ClassHistogram::new_with_constructor(go_library_buckets);
        controller.register(
            "persistentvolume_delete_duration_seconds",
            "Latency in seconds to delete persistent volumes. Failed deletion attempts are ignored. Broken down by storage class name.",
            delete_duration.clone(),
        );
        // The Go library has no resize; these follow its naming.
        let resize_total = ClassCounter::default();
        controller.register(
            "persistentvolumeclaim_resize",
            "Total number of persistent volumes grown successfully. Broken down by storage class name.",
            resize_total.clone(),
        );
        let resize_failed_total = ClassCounter::default();
        controller.register(
            "persistentvolumeclaim_resize_failed",
            "Total number of persistent volume resize failed attempts. Broken down by storage class name.",
            resize_failed_total.clone(),
        );
        let resize_duration = ClassHistogram::new_with_constructor(go_library_buckets);
        controller.register(
            "persistentvolumeclaim_resize_duration_seconds",
            "Latency in seconds to grow persistent volumes. Failed attempts are ignored. Broken down by storage class name.",
            resize_duration.clone(),
        );
        let wasmprov = registry.sub_registry_with_prefix("wasmprov");
        let plugin_calls = Family::default();
        wasmprov.register(
            "plugin_calls",
            "Plugin calls by plugin, call and result",
            plugin_calls.clone(),
        );
        let plugin_call_duration =
            Family::new_with_constructor(latency_buckets as fn() -> Histogram);
        wasmprov.register(
            "plugin_call_duration_seconds",
            "Latency in seconds of plugin calls (fresh instance included)",
            plugin_call_duration.clone(),
        );
        let leader = Gauge::default();
        wasmprov.register(
            "leader",
            "1 while this instance is the active provisioner",
            leader.clone(),
        );
        let plugin_reloads = Family::default();
        wasmprov.register(
            "plugin_reload",
            "New plugin versions seen, by plugin and result (loaded, rejected, removed)",
            plugin_reloads.clone(),
        );
        let plugin_info = Family::default();
        wasmprov.register(
            "plugin_info",
            "The version (digest) each plugin serves, as a series with value 1",
            plugin_info.clone(),
        );
        let policy_reloads = Family::default();
        wasmprov.register(
            "policy_reload",
            "Sandbox policy file changes, by result (loaded, rejected)",
            policy_reloads.clone(),
        );
        let volume_finalizer_conflicts = ClassCounter::default();
        wasmprov.register(
            "volume_finalizer_conflicts",
            "Volumes whose finalizer another controller kept undoing, so the host stopped writing it. Broken down by storage class name.",
            volume_finalizer_conflicts.clone(),
        );
        let unusable_grants = Family::default();
        wasmprov.register(
            "unusable_grants",
            "Granted volume directories (output.paths) refusing new volumes because one held a symbolic link where volumes live when the policy loaded, by plugin",
            unusable_grants.clone(),
        );
        let volumes_on_gone_nodes = Family::default();
        wasmprov.register(
            "volumes_on_gone_nodes",
            "Released volumes whose storage is on a node that no longer exists: kept, never deleted by a plugin (node hosts' janitor). Broken down by storage class name.",
            volumes_on_gone_nodes.clone(),
        );
        let capacity_bytes = Family::default();
        wasmprov.register(
            "capacity_bytes",
            "What a new volume of a storage class may still take on a node: the free space of the filesystem its volumes fill, less the plugin's reserve and what volumes there were promised and have not written (node hosts). Broken down by storage class name and node.",
            capacity_bytes.clone(),
        );
        let capacity_max_volume_bytes = Family::default();
        wasmprov.register(
            "capacity_max_volume_bytes",
            "The largest volume of a storage class a node takes now: capacity_bytes, or less where the plugin's output.maxCapacity is smaller (node hosts). Broken down by storage class name and node.",
            capacity_max_volume_bytes.clone(),
        );
        Self {
            registry,
            provision_total,
            provision_failed_total,
            provision_duration,
            delete_total,
            delete_failed_total,
            delete_duration,
            resize_total,
            resize_failed_total,
            resize_duration,
            plugin_calls,
            plugin_call_duration,
            leader,
            plugin_reloads,
            plugin_info,
            policy_reloads,
            volume_finalizer_conflicts,
            unusable_grants,
            volumes_on_gone_nodes,
            capacity_bytes,
            capacity_max_volume_bytes,
        }
    }
}

impl Metrics {
    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub fn class(class: &str) -> ClassLabels {
        ClassLabels {
            class: class.to_owned(),
        }
    }

    /// The provisioning labels of a claim, as the Go library reads them
    /// (`spec.storageClassName` only, not the beta class annotation the
    /// lifecycle honours: dashboards see the same labels).
    pub fn provision_labels(claim: &PersistentVolumeClaim) -> ProvisionLabels {
        let spec = claim.spec.as_ref();
        ProvisionLabels {
            class: spec
                .and_then(|s| s.storage_class_name.clone())
                .unwrap_or_default(),
            source: spec
                .and_then(|s| s.data_source.as_ref())
                .map(|d| d.kind.clone())
                .unwrap_or_default(),
        }
    }

    pub fn plugin_call(&self, plugin: &str, call: &str, result: &str, took: Duration) {
        self.plugin_calls
            .get_or_create(&PluginResultLabels {
                plugin: plugin.to_owned(),
                call: call.to_owned(),
                result: result.to_owned(),
            })
            .inc();
        self.plugin_call_duration
            .get_or_create(&PluginCallLabels {
                plugin: plugin.to_owned(),
                call: call.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    pub fn plugin_reload(&self, plugin: &str, result: &str) {
        self.plugin_reloads
            .get_or_create(&ReloadLabels {
                plugin: plugin.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }

    /// Records that `plugin` now serves `digest` (`None`: nothing).
    pub fn plugin_version(&self, plugin: &str, old: Option<&str>, new: Option<&str>) {
        let labels = |digest: &str| PluginVersionLabels {
            plugin: plugin.to_owned(),
            digest: digest.to_owned(),
        };
        if let Some(old) = old {
            self.plugin_info.remove(&labels(old));
        }
        if let Some(new) = new {
            self.plugin_info.get_or_create(&labels(new)).set(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provisioning_metrics_have_the_go_librarys_labels_and_buckets() {
        let metrics = Metrics::default();
        let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "spec": {"storageClassName": "fast",
                "dataSource": {"kind": "VolumeSnapshot", "name": "snap", "apiGroup": "snapshot.storage.k8s.io"}},
        }))
        .unwrap();
        let labels = Metrics::provision_labels(&claim);
        metrics.provision_total.get_or_create(&labels).inc();
        metrics
            .provision_duration
            .get_or_create(&labels)
            .observe(0.2);
        metrics
            .delete_duration
            .get_or_create(&Metrics::class("fast"))
            .observe(0.2);
        let text = metrics.encode();
        for want in [
            "controller_persistentvolumeclaim_provision_total{class=\"fast\",source=\"VolumeSnapshot\"} 1",
            // client_golang's DefBuckets, 5 ms to 10 s.
            "controller_persistentvolumeclaim_provision_duration_seconds_bucket{le=\"0.005\",class=\"fast\",source=\"VolumeSnapshot\"} 0",
            "controller_persistentvolumeclaim_provision_duration_seconds_bucket{le=\"0.25\",class=\"fast\",source=\"VolumeSnapshot\"} 1",
            "controller_persistentvolumeclaim_provision_duration_seconds_bucket{le=\"10.0\",class=\"fast\",source=\"VolumeSnapshot\"} 1",
            "controller_persistentvolume_delete_duration_seconds_bucket{le=\"10.0\",class=\"fast\"} 1",
        ] {
            assert!(text.contains(want), "missing {want} in:\n{text}");
        }
        let buckets = text
            .lines()
            .filter(|l| l.starts_with("controller_persistentvolume_delete_duration_seconds_bucket"))
            .count();
        assert_eq!(buckets, 12, "11 buckets and +Inf:\n{text}");
    }
}
