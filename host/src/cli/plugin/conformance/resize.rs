//! The resize checks (5, 6 and 10), for plugins that export `resizer`.

use std::time::Instant;

use k8s_openapi::api::core::v1::PersistentVolume;

use super::suite::Suite;
use super::volumes::{capacity_of, with_capacity};
use crate::provisioner::{ResizeError, ResizeOptions, ResizeState, Resized};

/// The size the resize checks grow the first volume to: 2Gi.
const RESIZED_BYTES: u64 = 2 << 30;

fn resize_state_name(state: ResizeState) -> &'static str {
    match state {
        ResizeState::Failed => "failed",
        ResizeState::InBackground => "in-background",
        ResizeState::NoChange => "no-change",
        ResizeState::Infeasible => "infeasible",
    }
}

impl Suite {
    /// Checks 5 and 6: growing the first volume, and again. Returns it
    /// grown, for check 10; skips check 10 too when it cannot. skips check 10 too when it cannot.
    pub(super) async fn resize_checks(
        &mut self,
        pv_a: Option<&PersistentVolume>,
    ) -> Option<PersistentVolume> {
        const CHECKS: [&str; 3] = [
            "resize",
            "resize is idempotent",
            "resize of a deleted volume",
        ];
        let plugin = self.provisioner.plugin();
        if !plugin.can_resize() {
            let why = format!(
                "the plugin does not export resizer (a wasmprov:provisioner@{} plugin built for the provisioner world): its volumes cannot grow",
                plugin.compiled().contract_version
            );
            for check in CHECKS {
                self.skip(check, why.clone());
            }
            return None;
        }
        let Some(pv_a) = pv_a else {
            for check in CHECKS {
                self.skip(check, "needs a provisioned volume");
            }
            return None;
        };
        let name = pv_a.metadata.name.clone().unwrap_or_default();
        let grow = ResizeOptions {
            requested_bytes: RESIZED_BYTES,
            limit_bytes: None,
        };
        let check = "resize";
        let grown = match self.resize(check, pv_a, &grow).await {
            Ok(r) => {
                self.pass(
                    check,
                    format!(
                        "{name} grew to {} bytes (asked {RESIZED_BYTES})",
                        r.capacity_bytes
                    ),
                );
                Some(with_capacity(pv_a, r.capacity_bytes))
            }
            Err(e) => {
                self.fail(
                    check,
                    format!(
                        "growing {name} to 2Gi answered {}: {}",
                        resize_state_name(e.state),
                        e.message
                    ),
                );
                None
            }
        };
        let check = "resize is idempotent";
        match &grown {
            None => self.skip(check, "needs a grown volume"),
            Some(grown) => {
                let first = capacity_of(grown).unwrap_or_default();
                match self.resize(check, grown, &grow).await {
                    Ok(r) if r.capacity_bytes == first => self.pass(
                        check,
                        format!("growing it to 2Gi again kept {} bytes", r.capacity_bytes),
                    ),
                    Ok(r) => self.fail(
                        check,
                        format!(
                            "growing {name} to 2Gi again gave {} bytes, not the {first} it answered first; the host asks again after a restart and must get the same size",
                            r.capacity_bytes
                        ),
                    ),
                    Err(e) => self.fail(
                        check,
                        format!(
                            "growing {name} to 2Gi again answered {}: {}; a volume already that large is a success",
                            resize_state_name(e.state),
                            e.message
                        ),
                    ),
                }
            }
        }
        if grown.is_none() {
            self.skip(CHECKS[2], "needs a grown volume");
        }
        grown
    }

    /// Check 10: the grown first volume, deleted by check 7, cannot grow.
    pub(super) async fn resize_of_a_deleted_volume(&mut self, grown: &PersistentVolume) {
        let check = "resize of a deleted volume";
        let name = grown.metadata.name.clone().unwrap_or_default();
        let options = ResizeOptions {
            requested_bytes: 2 * RESIZED_BYTES,
            limit_bytes: None,
        };
        match self.resize(check, grown, &options).await {
            Err(e) => self.pass(
                check,
                format!(
                    "{name} (deleted) was refused: {}: {}",
                    resize_state_name(e.state),
                    e.message
                ),
            ),
            Ok(r) => self.fail(
                check,
                format!(
                    "{name} was deleted, yet resize said it grew to {} bytes; check that the volume's storage exists before reporting it grown",
                    r.capacity_bytes
                ),
            ),
        }
    }

    /// One resize through the host's own code, recording what was seen.
    async fn resize(
        &mut self,
        check: &str,
        pv: &PersistentVolume,
        options: &ResizeOptions,
    ) -> Result<Resized, ResizeError> {
        // As the host does: what the volume does not record comes from its class.
        let pv = crate::provisioner::with_class_parameters(pv, Some(&self.class));
        let started = Instant::now();
        let result = self.provisioner.resize(&pv, options).await;
        self.record_call(started.elapsed());
        if let Err(e) = &result {
            self.record_sandbox_failure(check, &e.message);
        }
        result
    }
}
