//! `plugins.<name>.image`: the plugin's code comes from an OCI registry, by
//! reference, instead of a plugins directory or ConfigMap.
//!
//! ```yaml
//! plugins:
//!   hostpath:
//!     image:
//!       reference: registry.example.com/plugins/hostpath:1.0.0   # or …@sha256:<digest>
//!       pollInterval: 5m      # how often a tag is looked up again (default)
//!       plainHttp: false      # true only for a registry without TLS
//! ```
//!
//! A digest pins one version; a tag is looked up every `pollInterval`, and
//! a new digest behind it is a new version, validated before it serves
//! like any reload.

use std::time::Duration;

use serde::Deserialize;

use super::FieldError;

/// The shortest `pollInterval`: registries rate-limit.
pub const MIN_POLL_INTERVAL: Duration = Duration::from_secs(1);
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(300);

/// Where a plugin's versions come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSource {
    pub reference: String,
    /// Whether `reference` names a digest (one version, never polled).
    pub pinned: bool,
    pub poll_interval: Duration,
    pub plain_http: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct ImageSpec {
    reference: String,
    poll_interval: Option<String>,
    #[serde(default)]
    plain_http: bool,
}

impl ImageSpec {
    pub(super) fn resolve(self, field: &str) -> Result<ImageSource, FieldError> {
        let reference = self.reference.trim().to_owned();
        let parsed = reference.parse::<oci_client::Reference>().map_err(|e| {
            (
                format!("{field}.image.reference"),
                format!(
                    "{reference:?} is not an OCI reference ({e}); write \
                         REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:DIGEST"
                ),
            )
        })?;
        let poll_interval = match self.poll_interval {
            None => DEFAULT_POLL_INTERVAL,
            Some(text) => {
                let interval = humantime::parse_duration(&text).map_err(|e| {
                    (
                        format!("{field}.image.pollInterval"),
                        format!("{text:?} is not a duration ({e}); e.g. 5m"),
                    )
                })?;
                if interval < MIN_POLL_INTERVAL {
                    return Err((
                        format!("{field}.image.pollInterval"),
                        format!("{text} is shorter than {MIN_POLL_INTERVAL:?}"),
                    ));
                }
                interval
            }
        };
        Ok(ImageSource {
            pinned: parsed.digest().is_some(),
            reference,
            poll_interval,
            plain_http: self.plain_http,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::PolicySet;
    use std::path::Path;
    use std::time::Duration;

    fn parse(yaml: &str) -> Result<PolicySet, String> {
        PolicySet::parse(yaml, Path::new("policy.yaml")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_tag_is_polled_and_a_digest_pins() {
        let set = parse(
            "plugins:\n  a: {image: {reference: r.example/p/a:1, pollInterval: 30s}}\n  \
             b: {image: {reference: \"r.example/p/b@sha256:0000000000000000000000000000000000000000000000000000000000000000\", plainHttp: true}}\n",
        )
        .unwrap();
        let a = set.image_for("a").unwrap();
        assert_eq!(
            (a.pinned, a.poll_interval, a.plain_http),
            (false, Duration::from_secs(30), false)
        );
        let b = set.image_for("b").unwrap();
        assert!(b.pinned && b.plain_http);
        assert_eq!(b.poll_interval, Duration::from_secs(300));
        assert!(set.image_for("c").is_none());
    }

    #[test]
    fn a_bad_reference_or_interval_names_the_field() {
        for (yaml, want) in [
            (
                "plugins: {a: {image: {reference: \"Not A Ref!\"}}}",
                "plugins.a.image.reference",
            ),
            (
                "plugins: {a: {image: {reference: r.example/a:1, pollInterval: 10ms}}}",
                "plugins.a.image.pollInterval",
            ),
            (
                "plugins: {a: {image: {reference: r.example/a:1, pollInterval: often}}}",
                "not a duration",
            ),
            (
                "plugins: {a: {image: {ref: r.example/a:1}}}",
                "unknown field `ref`",
            ),
        ] {
            let error = parse(yaml).unwrap_err();
            assert!(error.contains(want), "{yaml}: {error}");
        }
    }
}
