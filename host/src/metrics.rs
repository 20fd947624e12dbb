//! Prometheus metrics. The provisioning metrics keep the Go library's names
//! and labels so existing dashboards and alerts work; plugin metrics are ours.
//! One registry per host (no global state).

use std::time::Duration;

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

/// Every metric the host exports.
pub struct Metrics {
    registry: Registry,
    pub provision_total: ClassCounter,
    pub provision_failed_total: ClassCounter,
    pub provision_duration: ClassHistogram,
    pub delete_total: ClassCounter,
    pub delete_failed_total: ClassCounter,
    pub delete_duration: ClassHistogram,
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
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub result: String,
}

fn latency_buckets() -> Histogram {
    // 1 ms … ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let controller = registry.sub_registry_with_prefix("controller");
        let provision_total = ClassCounter::default();
        controller.register(
            "persistentvolumeclaim_provision",
            "Total number of persistent volumes provisioned successfully, by storage class",
            provision_total.clone(),
        );
        let provision_failed_total = ClassCounter::default();
        controller.register(
            "persistentvolumeclaim_provision_failed",
            "Total number of persistent volume provision failures, by storage class",
            provision_failed_total.clone(),
        );
        let provision_duration = ClassHistogram::new_with_constructor(latency_buckets);
        controller.register(
            "persistentvolumeclaim_provision_duration_seconds",
            "Latency in seconds to provision persistent volumes, by storage class",
            provision_duration.clone(),
        );
        let delete_total = ClassCounter::default();
        controller.register(
            "persistentvolume_delete",
            "Total number of persistent volumes deleted successfully, by storage class",
            delete_total.clone(),
        );
        let delete_failed_total = ClassCounter::default();
        controller.register(
            "persistentvolume_delete_failed",
            "Total number of persistent volume delete failures, by storage class",
            delete_failed_total.clone(),
        );
        let delete_duration = ClassHistogram::new_with_constructor(latency_buckets);
        controller.register(
            "persistentvolume_delete_duration_seconds",
            "Latency in seconds to delete persistent volumes, by storage class",
            delete_duration.clone(),
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
        Self {
            registry,
            provision_total,
            provision_failed_total,
            provision_duration,
            delete_total,
            delete_failed_total,
            delete_duration,
            plugin_calls,
            plugin_call_duration,
            leader,
            plugin_reloads,
            plugin_info,
            policy_reloads,
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
