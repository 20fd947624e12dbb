//! The capacity checks (18 and 19), for plugins that export `capacity`.

use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::suite::Suite;
use crate::policy::DirMode;
use crate::provisioner::ReportedCapacity;
use crate::quantity::Bytes;

const CHECK: &str = "capacity";
const FOLLOWS: &str = "capacity counts new volumes";

/// What the first capacity call said, for check 19.
pub(super) enum Before {
    /// Nothing to compare: skipped or failed (check 19 says so).
    Nothing(String),
    Figure(ReportedCapacity),
}

impl Suite {
    /// Check 18: the plugin's figure for the class on a node, checked as a
    /// node host checks it (against the filesystem of its directory).
    pub(super) async fn capacity_check(&mut self) -> Before {
        let plugin = self.provisioner.plugin();
        if !plugin.reports_capacity() {
            let why = format!(
                "the plugin does not export capacity (a wasmprov:provisioner@{} plugin): node \
                 hosts measure its directory themselves",
                plugin.compiled().contract_version
            );
            self.skip(CHECK, why.clone());
            return Before::Nothing(why);
        }
        match self.ask_capacity().await {
            Ok(Some(figure)) => match self.beyond_the_disk(&figure) {
                Some(problem) => {
                    self.fail(CHECK, problem.clone());
                    Before::Nothing(problem)
                }
                None => {
                    self.pass(CHECK, describe(&figure));
                    Before::Figure(figure)
                }
            },
            Ok(None) => {
                let why = "no figure for this class (none): node hosts measure the plugin's \
                           directory themselves";
                self.pass(CHECK, why);
                Before::Nothing(why.into())
            }
            Err(e) => {
                self.fail(CHECK, e.clone());
                Before::Nothing(e)
            }
        }
    }

    /// Check 19: once volumes were made, the figure is no larger.
    pub(super) async fn capacity_follows(&mut self, before: Before, volumes: usize) {
        let before = match before {
            Before::Figure(figure) => figure,
            Before::Nothing(why) => return self.skip(FOLLOWS, why),
        };
        if volumes == 0 {
            return self.skip(FOLLOWS, "needs a provisioned volume");
        }
        match self.ask_capacity().await {
            Ok(Some(after)) if after.available_bytes <= before.available_bytes => self.pass(
                FOLLOWS,
                format!(
                    "{} available after {volumes} volume(s), {} before",
                    Bytes(after.available_bytes),
                    Bytes(before.available_bytes)
                ),
            ),
            Ok(Some(after)) => self.fail(
                FOLLOWS,
                format!(
                    "{} available after {volumes} new volume(s), more than the {} before: \
                     the figure must count the volumes the plugin made",
                    Bytes(after.available_bytes),
                    Bytes(before.available_bytes)
                ),
            ),
            Ok(None) => self.fail(
                FOLLOWS,
                "a figure before the volumes, none after: answer the same way for a class",
            ),
            Err(e) => self.fail(FOLLOWS, e),
        }
    }

    async fn ask_capacity(&mut self) -> Result<Option<ReportedCapacity>, String> {
        let node = self.node.clone().unwrap_or_else(|| Node {
            metadata: ObjectMeta {
                name: Some("conformance-node".into()),
                labels: Some(
                    [(
                        "kubernetes.io/hostname".to_owned(),
                        "conformance-node".to_owned(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        });
        let started = Instant::now();
        let result = self.provisioner.capacity(&self.class, &node).await;
        self.record_call(started.elapsed());
        if let Err(e) = &result {
            self.record_sandbox_failure(CHECK, e);
        }
        result
    }

    /// Why `figure` cannot be true of the filesystem of the directory a
    /// node host would measure for the plugin, if it cannot.
    fn beyond_the_disk(&self, figure: &ReportedCapacity) -> Option<String> {
        let policy = self.provisioner.plugin().policy();
        let directory = match &policy.capacity {
            Some(c) => c.directory.clone(),
            None => (policy.preopens.iter())
                .find(|p| p.mode == DirMode::ReadWrite)?
                .host
                .clone(),
        };
        let size = crate::lifecycle::capacity::disk::measure(&directory)
            .ok()?
            .size;
        (figure.available_bytes > size).then(|| {
            format!(
                "{} available, more than the whole filesystem of {} ({}): a node host refuses \
                 this figure",
                Bytes(figure.available_bytes),
                directory.display(),
                Bytes(size)
            )
        })
    }
}

fn describe(figure: &ReportedCapacity) -> String {
    format!(
        "{} available, largest volume {}",
        Bytes(figure.available_bytes),
        Bytes(figure.maximum_volume_bytes)
    )
}
