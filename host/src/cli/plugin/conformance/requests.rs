//! Requests that can never succeed (checks 11 to 13): each must be answered
//! with `invalid-argument`, which the host retries only slowly.

use k8s_openapi::api::core::v1::PersistentVolume;

use super::super::state_name;
use super::suite::{Suite, CLAIM_SIZE};
use super::volumes::describe_pv;
use crate::provisioner::{ProvisionOptions, ProvisionState};

/// The parameter check 12 adds to the class: no plugin knows it.
const UNKNOWN_PARAMETER: &str = "conformanceUnknownParameter";

impl Suite {
    /// Checks 11 to 13: requests that must be answered with invalid-argument.
    pub(super) async fn bad_requests(&mut self, cleanup: &mut Vec<PersistentVolume>) {
        // 11. zero-size claim
        let check = "zero-size claim";
        let zero = self.claim("zero", "0");
        let opts = self.options(&zero, self.class.clone());
        self.expect_invalid(check, &opts, "a claim of 0 bytes", None, cleanup)
            .await;

        // 12. a parameter the plugin does not know: an operator's typo must
        // be refused, naming it, rather than quietly ignored.
        let mut class = self.class.clone();
        class
            .parameters
            .get_or_insert_with(Default::default)
            .insert(UNKNOWN_PARAMETER.to_owned(), "1".to_owned());
        let claim = self.claim("unknown-parameter", CLAIM_SIZE);
        let opts = self.options(&claim, class);
        let what =
            format!("the class with an extra parameter {UNKNOWN_PARAMETER:?} (an operator's typo)");
        self.expect_invalid(
            "unknown parameter",
            &opts,
            &what,
            Some(UNKNOWN_PARAMETER),
            cleanup,
        )
        .await;

        // 13. missing parameters, one at a time
        let params: Vec<String> = crate::wasm_provisioner::plugin_parameters(&self.class)
            .into_keys()
            .collect();
        if params.is_empty() {
            self.skip(
                "missing parameters",
                "the class has no parameters (pass --class to test a configured plugin)",
            );
        }
        for (i, key) in params.iter().enumerate() {
            let check = format!("without parameter {key:?}");
            let mut class = self.class.clone();
            if let Some(p) = class.parameters.as_mut() {
                p.remove(key);
            }
            let claim = self.claim(&format!("param-{i}"), CLAIM_SIZE);
            let opts = self.options(&claim, class);
            match self.provision(&check, &opts).await {
                Err(e) if e.state == ProvisionState::InvalidArgument => {
                    self.pass(&check, format!("required: invalid-argument: {}", e.message))
                }
                Ok(pv) => {
                    self.pass(&check, format!("optional: the default works ({})", describe_pv(&pv)));
                    cleanup.push(pv);
                }
                Err(e) => self.fail(
                    &check,
                    format!(
                        "answered {}: {}; a missing required parameter must be answered with invalid-argument (naming it), and an optional one must have a working default",
                        state_name(e.state),
                        e.message
                    ),
                ),
            }
        }
    }

    /// A provision that must be answered with invalid-argument (whose
    /// message names `named`, if given).
    async fn expect_invalid(
        &mut self,
        check: &str,
        opts: &ProvisionOptions,
        what: &str,
        named: Option<&str>,
        cleanup: &mut Vec<PersistentVolume>,
    ) {
        match self.provision(check, opts).await {
            Err(e) if e.state == ProvisionState::InvalidArgument => match named {
                Some(name) if !e.message.contains(name) => self.fail(
                    check,
                    format!(
                        "{what} was answered invalid-argument: {}; the message must name {name:?}, so the operator knows what to fix",
                        e.message
                    ),
                ),
                _ => self.pass(check, format!("invalid-argument: {}", e.message)),
            },
            Ok(pv) => {
                self.fail(
                    check,
                    format!(
                        "{what} got a volume ({}); it must be answered with invalid-argument",
                        describe_pv(&pv)
                    ),
                );
                cleanup.push(pv);
            }
            Err(e) => self.fail(
                check,
                format!(
                    "{what} was answered {}: {}; it must be answered with invalid-argument (the request can never succeed)",
                    state_name(e.state),
                    e.message
                ),
            ),
        }
    }
}
