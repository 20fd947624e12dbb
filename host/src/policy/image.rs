//! `plugins.<name>.image`: the plugin's code comes from an OCI registry, by
//! reference, instead of a plugins directory or ConfigMap.
//!
//! ```yaml
//! plugins:
//!   hostpath:
//!     image:
//!       reference: registry.example.com/plugins/hostpath:1.0.0   # or …@sha256:<digest>
//!       pollInterval: 5m      # how often a tag is looked up again (default)
//!       signature:            # optional: serve only versions signed with cosign
//!         keys: [/etc/wasmprov/signing/cosign.pub]  # by one of these keys
//! registries:                 # how to reach each registry (optional)
//!   registry.example.com:
//!     credentials: /etc/wasmprov/registry-auth/.dockerconfigjson  # a mounted Secret
//!     caFile: /etc/wasmprov/registry-ca/ca.crt  # a private authority (PEM)
//!     plainHttp: false        # true only for a registry without TLS
//!     mirrors: [mirror.internal:5000]  # asked first, in order
//!   mirror.internal:5000: {caFile: …}  # a mirror is reached by its own entry
//! ```
//!
//! A digest pins one version; a tag is looked up every `pollInterval`, and
//! a new digest behind it is a new version, validated before it serves
//! like any reload. The credentials file (a `kubernetes.io/dockerconfigjson`
//! Secret's `.dockerconfigjson`) and the CA file are read at each look, so
//! a rotated Secret takes effect without a restart. With `signature`, a
//! version is served only once a cosign signature of its digest by one of
//! the keys is found (read at each look too). Mirrors are asked
//! before the registry itself (an air-gapped cluster's copy of it); what
//! they send is checked against its digest like the registry's own.

use std::path::PathBuf;
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
    /// The registry host of `reference` (`registry.example.com:5000`).
    pub registry: String,
    /// Whether `reference` names a digest (one version, never polled).
    pub pinned: bool,
    pub poll_interval: Duration,
    /// Public keys (PEM files) one of which must have signed a version;
    /// empty: signatures are not required.
    pub signature_keys: Vec<PathBuf>,
}

/// How to reach one registry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegistryAccess {
    pub plain_http: bool,
    /// A `.dockerconfigjson` file holding the registry's login.
    pub credentials: Option<PathBuf>,
    /// A PEM file of the authorities that sign the registry's certificate.
    pub ca_file: Option<PathBuf>,
    /// Registries (`host[:port]`) asked before this one, in order.
    pub mirrors: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct ImageSpec {
    reference: String,
    poll_interval: Option<String>,
    signature: Option<SignatureSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SignatureSpec {
    keys: Vec<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RegistrySpec {
    #[serde(default)]
    plain_http: bool,
    credentials: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    #[serde(default)]
    mirrors: Vec<String>,
}

impl RegistrySpec {
    pub(super) fn resolve(self, host: &str, field: &str) -> Result<RegistryAccess, FieldError> {
        for (key, path, what) in [
            (
                "credentials",
                &self.credentials,
                "the dockerconfigjson Secret",
            ),
            ("caFile", &self.ca_file, "the authority's certificate"),
        ] {
            if let Some(path) = path.as_ref().filter(|p| !p.is_absolute()) {
                return Err((
                    format!("{field}.{key}"),
                    format!(
                        "{} must be an absolute path (where {what} is mounted)",
                        path.display()
                    ),
                ));
            }
        }
        for (i, mirror) in self.mirrors.iter().enumerate() {
            let problem = if mirror == host {
                Some("is the registry itself".to_owned())
            } else {
                // A mirror is a registry host, as a reference starts.
                format!("{mirror}/x:1")
                    .parse::<oci_client::Reference>()
                    .err()
                    .map(|e| e.to_string())
                    .or_else(|| mirror.contains('/').then(|| "has a path".to_owned()))
            };
            if let Some(problem) = problem {
                return Err((
                    format!("{field}.mirrors[{i}]"),
                    format!(
                        "{mirror:?} {problem}; a mirror is another registry's host[:port], \
                         e.g. mirror.internal:5000"
                    ),
                ));
            }
        }
        Ok(RegistryAccess {
            plain_http: self.plain_http,
            credentials: self.credentials,
            ca_file: self.ca_file,
            mirrors: self.mirrors,
        })
    }
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
        let signature_keys = match self.signature {
            None => Vec::new(),
            Some(SignatureSpec { keys }) => {
                if keys.is_empty() {
                    return Err((
                        format!("{field}.image.signature.keys"),
                        "is empty: list the public keys (cosign.pub files) whose signatures \
                         count, or remove signature"
                            .to_owned(),
                    ));
                }
                if let Some((i, key)) = keys.iter().enumerate().find(|(_, k)| !k.is_absolute()) {
                    return Err((
                        format!("{field}.image.signature.keys[{i}]"),
                        format!(
                            "{} must be an absolute path (where the key is mounted)",
                            key.display()
                        ),
                    ));
                }
                keys
            }
        };
        Ok(ImageSource {
            signature_keys,
            pinned: parsed.digest().is_some(),
            registry: parsed.registry().to_owned(),
            reference,
            poll_interval,
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
            "plugins:\n  a: {image: {reference: r.example/p/a:1, pollInterval: 30s, \
             signature: {keys: [/etc/keys/a.pub]}}}\n  \
             b: {image: {reference: \"r.example/p/b@sha256:0000000000000000000000000000000000000000000000000000000000000000\"}}\n\
             registries: {r.example: {plainHttp: true, credentials: /etc/auth/.dockerconfigjson, \
             caFile: /etc/ca/ca.crt, mirrors: [\"m.internal:5000\", m2.internal]}}\n",
        )
        .unwrap();
        let a = set.image_for("a").unwrap();
        assert_eq!(
            (a.pinned, a.poll_interval),
            (false, Duration::from_secs(30))
        );
        assert_eq!(a.registry, "r.example");
        assert_eq!(a.signature_keys, [Path::new("/etc/keys/a.pub")]);
        let b = set.image_for("b").unwrap();
        assert!(b.pinned);
        assert_eq!(b.poll_interval, Duration::from_secs(300));
        assert!(b.signature_keys.is_empty());
        assert!(set.image_for("c").is_none());
        let access = set.registry_access("r.example");
        assert!(access.plain_http);
        assert_eq!(
            access.credentials.as_deref(),
            Some(Path::new("/etc/auth/.dockerconfigjson"))
        );
        assert_eq!(access.ca_file.as_deref(), Some(Path::new("/etc/ca/ca.crt")));
        assert_eq!(access.mirrors, ["m.internal:5000", "m2.internal"]);
        assert_eq!(set.registry_access("elsewhere.example"), Default::default());
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
                "registries: {r.example: {credentials: auth.json}}",
                "registries.r.example.credentials",
            ),
            (
                "plugins: {a: {image: {reference: r.example/a:1, signature: {keys: []}}}}",
                "plugins.a.image.signature.keys: is empty",
            ),
            (
                "plugins: {a: {image: {reference: r.example/a:1, signature: {keys: [k.pub]}}}}",
                "plugins.a.image.signature.keys[0]",
            ),
            (
                "registries: {r.example: {caFile: ca.crt}}",
                "registries.r.example.caFile",
            ),
            (
                "registries: {r.example: {mirrors: [r.example]}}",
                "registries.r.example.mirrors[0]: \"r.example\" is the registry itself",
            ),
            (
                "registries: {r.example: {mirrors: [m.internal, \"m.internal/path\"]}}",
                "registries.r.example.mirrors[1]",
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
