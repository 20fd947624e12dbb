//! StorageClass parameters with typed errors.
//!
//! Every accessor returns a [`ParamError`] whose text names the parameter,
//! what was wrong and how to fix it; `?` turns it into
//! `provision-error::invalid-argument` (and, in `delete`, into
//! `delete-error::failed`).

use std::fmt;

use crate::{DeleteError, ProvisionError, ResizeError};

/// A class parameter that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamError {
    /// A required parameter is not set.
    Missing {
        plugin: String,
        key: String,
        /// What to set it to, e.g. "the NFS server's address, e.g. 10.0.0.5".
        what: String,
    },
    /// A parameter is set to something unusable.
    Invalid {
        key: String,
        value: String,
        /// Why, and what is accepted.
        why: String,
    },
    /// Parameters the plugin does not know (typos must not pass silently).
    Unknown {
        plugin: String,
        keys: Vec<String>,
        known: Vec<String>,
    },
}

impl fmt::Display for ParamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamError::Missing { plugin, key, what } => write!(
                f,
                "missing class parameter \"{key}\": the {plugin} plugin needs it; set it to {what}"
            ),
            ParamError::Invalid { key, value, why } => {
                write!(f, "class parameter \"{key}\" is {value:?}: {why}")
            }
            ParamError::Unknown {
                plugin,
                keys,
                known,
            } => write!(
                f,
                "unknown class parameter{} {}: the {plugin} plugin accepts only {} \
                 (parameter names are case-sensitive)",
                if keys.len() == 1 { "" } else { "s" },
                quote_list(keys),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    quote_list(known)
                },
            ),
        }
    }
}

impl std::error::Error for ParamError {}

impl From<ParamError> for ProvisionError {
    fn from(e: ParamError) -> Self {
        ProvisionError::InvalidArgument(e.to_string())
    }
}

impl From<ParamError> for DeleteError {
    fn from(e: ParamError) -> Self {
        DeleteError::Failed(format!(
            "the volume's recorded class parameters are unusable: {e}"
        ))
    }
}

impl From<ParamError> for ResizeError {
    fn from(e: ParamError) -> Self {
        ResizeError::InvalidArgument(format!(
            "the volume's recorded class parameters are unusable: {e}"
        ))
    }
}

/// `"a", "b", "c"`.
pub fn quote_list<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|item| format!("{:?}", item.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A plugin's view of the class parameters (`storage-class.parameters` in
/// `provision`, `delete-request.parameters` in `delete`).
#[derive(Debug, Clone, Copy)]
pub struct Params<'a> {
    plugin: &'a str,
    pairs: &'a [(String, String)],
}

impl<'a> Params<'a> {
    /// `plugin` names the plugin in messages ("the nfs-subdir plugin needs...").
    pub fn new(plugin: &'a str, pairs: &'a [(String, String)]) -> Self {
        Params { plugin, pairs }
    }

    /// The raw value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        crate::lookup(self.pairs, key)
    }

    /// Fails with [`ParamError::Unknown`] if any key is not in `known`.
    pub fn reject_unknown(&self, known: &[&str]) -> Result<(), ParamError> {
        let mut keys: Vec<String> = self
            .pairs
            .iter()
            .filter(|(k, _)| !known.contains(&k.as_str()))
            .map(|(k, _)| k.clone())
            .collect();
        if keys.is_empty() {
            return Ok(());
        }
        keys.sort_unstable();
        Err(ParamError::Unknown {
            plugin: self.plugin.to_string(),
            keys,
            known: known.iter().map(|k| k.to_string()).collect(),
        })
    }

    /// The value of a required parameter; `what` says what to set it to (for
    /// the error), e.g. `"the NFS server's address, e.g. 10.0.0.5"`. An empty
    /// value counts as missing.
    pub fn required(&self, key: &str, what: &str) -> Result<&'a str, ParamError> {
        match self.get(key) {
            Some(value) if !value.is_empty() => Ok(value),
            _ => Err(ParamError::Missing {
                plugin: self.plugin.to_string(),
                key: key.to_string(),
                what: what.to_string(),
            }),
        }
    }

    /// The value of an optional parameter, or `default`.
    pub fn optional(&self, key: &str, default: &'a str) -> &'a str {
        self.get(key).unwrap_or(default)
    }

    /// A boolean: exactly `"true"` or `"false"` (as Kubernetes writes them),
    /// `default` when unset.
    pub fn bool(&self, key: &str, default: bool) -> Result<bool, ParamError> {
        match self.get(key) {
            None => Ok(default),
            Some("true") => Ok(true),
            Some("false") => Ok(false),
            Some(other) => Err(self.invalid(key, other, "it must be \"true\" or \"false\"")),
        }
    }

    /// One of `allowed` (case-sensitive), `default` when unset (`None`: required).
    pub fn one_of(
        &self,
        key: &str,
        allowed: &[&'a str],
        default: Option<&'a str>,
    ) -> Result<&'a str, ParamError> {
        let value = match (self.get(key), default) {
            (Some(value), _) => value,
            (None, Some(default)) => return Ok(default),
            (None, None) => {
                return Err(ParamError::Missing {
                    plugin: self.plugin.to_string(),
                    key: key.to_string(),
                    what: format!("one of {}", quote_list(allowed)),
                })
            }
        };
        allowed
            .iter()
            .find(|a| **a == value)
            .copied()
            .ok_or_else(|| {
                self.invalid(
                    key,
                    value,
                    &format!("it must be one of {}", quote_list(allowed)),
                )
            })
    }

    /// An unsigned integer, `default` when unset.
    pub fn u64(&self, key: &str, default: u64) -> Result<u64, ParamError> {
        match self.get(key) {
            None => Ok(default),
            Some(value) => value
                .parse()
                .map_err(|_| self.invalid(key, value, "it must be a non-negative integer")),
        }
    }

    /// An absolute, normalized path (see [`crate::path::normalize_abs`]),
    /// `default` when unset (`None`: required, `what` describes it).
    pub fn abs_path(
        &self,
        key: &str,
        default: Option<&str>,
        what: &str,
    ) -> Result<String, ParamError> {
        let value = match (self.get(key), default) {
            (Some(value), _) => value,
            (None, Some(default)) => default,
            (None, None) => return Err(self.required(key, what).unwrap_err()),
        };
        crate::path::normalize_abs(value).map_err(|why| {
            self.invalid(
                key,
                value,
                &format!("it must be an absolute, normalized path: {why}"),
            )
        })
    }

    /// An [`ParamError::Invalid`] for `key`, for checks of the plugin's own.
    pub fn invalid(&self, key: &str, value: &str, why: &str) -> ParamError {
        ParamError::Invalid {
            key: key.to_string(),
            value: value.to_string(),
            why: why.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        items
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn required_and_optional() {
        let p = pairs(&[("server", "10.0.0.5"), ("empty", "")]);
        let params = Params::new("nfs", &p);
        assert_eq!(params.required("server", "x").unwrap(), "10.0.0.5");
        let err = params
            .required("share", "the exported directory, e.g. /exports")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "missing class parameter \"share\": the nfs plugin needs it; set it to the exported directory, e.g. /exports"
        );
        assert!(params.required("empty", "x").is_err());
        assert_eq!(params.optional("share", "/d"), "/d");
        assert_eq!(params.optional("server", "/d"), "10.0.0.5");
    }

    #[test]
    fn unknown_keys_are_named_sorted() {
        let p = pairs(&[("b", "1"), ("server", "x"), ("a", "2")]);
        let err = Params::new("nfs", &p)
            .reject_unknown(&["server", "share"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown class parameters \"a\", \"b\": the nfs plugin accepts only \"server\", \"share\""),
            "{err}"
        );
        assert!(Params::new("nfs", &p)
            .reject_unknown(&["a", "b", "server"])
            .is_ok());
    }

    #[test]
    fn typed_values() {
        let p = pairs(&[
            ("yes", "true"),
            ("no", "false"),
            ("bad", "True"),
            ("mode", "delete"),
            ("n", "12"),
            ("path", "/srv/x/"),
            ("rel", "srv"),
        ]);
        let params = Params::new("t", &p);
        assert!(params.bool("yes", false).unwrap());
        assert!(!params.bool("no", true).unwrap());
        assert!(params.bool("unset", true).unwrap());
        let err = params.bool("bad", false).unwrap_err().to_string();
        assert!(err.contains("\"bad\" is \"True\"") && err.contains("\"true\" or \"false\""));
        assert_eq!(
            params.one_of("mode", &["delete", "archive"], None).unwrap(),
            "delete"
        );
        assert_eq!(
            params
                .one_of("unset", &["delete", "archive"], Some("archive"))
                .unwrap(),
            "archive"
        );
        assert!(params.one_of("yes", &["delete"], None).is_err());
        assert!(matches!(
            params.one_of("unset", &["delete"], None),
            Err(ParamError::Missing { .. })
        ));
        assert_eq!(params.u64("n", 0).unwrap(), 12);
        assert!(params.u64("path", 0).is_err());
        assert_eq!(params.abs_path("path", None, "x").unwrap(), "/srv/x");
        assert_eq!(params.abs_path("unset", Some("/d"), "x").unwrap(), "/d");
        assert!(matches!(
            params.abs_path("unset", None, "x"),
            Err(ParamError::Missing { .. })
        ));
        assert!(params
            .abs_path("rel", None, "x")
            .unwrap_err()
            .to_string()
            .contains("absolute"));
    }

    #[test]
    fn errors_convert_to_wit_errors() {
        let e = ParamError::Invalid {
            key: "k".into(),
            value: "v".into(),
            why: "w".into(),
        };
        assert!(matches!(
            ProvisionError::from(e.clone()),
            ProvisionError::InvalidArgument(m) if m == "class parameter \"k\" is \"v\": w"
        ));
        assert!(matches!(DeleteError::from(e), DeleteError::Failed(m) if m.contains("recorded")));
    }
}
