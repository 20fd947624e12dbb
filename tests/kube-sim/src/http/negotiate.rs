//! `Accept` header negotiation, matching media-type parameters exactly.

use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaRange {
    pub essence: String,
    pub params: Vec<(String, String)>,
}

impl MediaRange {
    pub fn param(&self, k: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(pk, _)| pk == k)
            .map(|(_, v)| v.as_str())
    }

    fn is_json(&self) -> bool {
        matches!(
            self.essence.as_str(),
            "application/json" | "application/*" | "*/*"
        )
    }
}

pub fn parse_accept(header: &str) -> Vec<MediaRange> {
    header
        .split(',')
        .filter_map(|part| {
            let mut it = part.split(';');
            let essence = it.next()?.trim().to_ascii_lowercase();
            if essence.is_empty() {
                return None;
            }
            let params = it
                .filter_map(|p| {
                    let (k, v) = p.split_once('=')?;
                    Some((k.trim().to_string(), v.trim().trim_matches('"').to_string()))
                })
                .filter(|(k, _)| k != "q")
                .collect();
            Some(MediaRange { essence, params })
        })
        .collect()
}

/// How an object or list response is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Object,
    Table,
}

/// Pick the first acceptable representation in the client's order.
pub fn object_format(accept: Option<&str>) -> ApiResult<Format> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Format::Object);
    };
    for r in parse_accept(accept) {
        if !r.is_json() {
            continue;
        }
        match r.param("as") {
            None => return Ok(Format::Object),
            Some("Table")
                if r.param("g") == Some("meta.k8s.io")
                    && matches!(r.param("v"), Some("v1" | "v1beta1")) =>
            {
                return Ok(Format::Table)
            }
            _ => {}
        }
    }
    Err(ApiError::NotAcceptable)
}

/// Which discovery document a `/api` or `/apis` request wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscoveryFormat {
    Plain,
    /// Aggregated discovery, `apidiscovery.k8s.io` at this version (`v2` or `v2beta1`).
    Aggregated(&'static str),
}

pub fn discovery_format(accept: Option<&str>) -> ApiResult<DiscoveryFormat> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(DiscoveryFormat::Plain);
    };
    for r in parse_accept(accept) {
        if !r.is_json() {
            continue;
        }
        match (r.param("g"), r.param("v"), r.param("as")) {
            (None, None, None) => return Ok(DiscoveryFormat::Plain),
            (Some("apidiscovery.k8s.io"), Some("v2"), Some("APIGroupDiscoveryList")) => {
                return Ok(DiscoveryFormat::Aggregated("v2"))
            }
            (Some("apidiscovery.k8s.io"), Some("v2beta1"), Some("APIGroupDiscoveryList")) => {
                return Ok(DiscoveryFormat::Aggregated("v2beta1"))
            }
            _ => {}
        }
    }
    Err(ApiError::NotAcceptable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_accept_headers() {
        let get = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(object_format(Some(get)).unwrap(), Format::Table);
        assert_eq!(
            object_format(Some("application/json")).unwrap(),
            Format::Object
        );
        assert_eq!(object_format(None).unwrap(), Format::Object);
        assert!(object_format(Some("application/vnd.kubernetes.protobuf")).is_err());
        let disc = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(
            discovery_format(Some(disc)).unwrap(),
            DiscoveryFormat::Aggregated("v2")
        );
        let old = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(
            discovery_format(Some(old)).unwrap(),
            DiscoveryFormat::Aggregated("v2beta1")
        );
        // `v=v2` must not match `v=v2beta1` and vice versa.
        let v3 =
            "application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList,application/json";
        assert_eq!(discovery_format(Some(v3)).unwrap(), DiscoveryFormat::Plain);
    }
}
