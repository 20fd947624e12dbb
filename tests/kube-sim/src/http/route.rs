//! URL paths → what they address.

use crate::resources::{self, ResourceId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Version,
    Healthz,
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/<group>`
    Group(String),
    /// `/api/v1` or `/apis/<group>/<version>`
    GroupVersion(String, String),
    OpenApiV3Root,
    /// `/openapi/v3/<api/v1 | apis/group/version>`
    OpenApiV3(String),
    OpenApiV2,
    Resource(ResourceRoute),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRoute {
    pub res: ResourceId,
    /// Namespace from the path (None: all namespaces or cluster-scoped).
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
}

pub fn parse(path: &str) -> Option<Route> {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    match segs.as_slice() {
        ["version"] => Some(Route::Version),
        ["healthz"] | ["livez"] | ["readyz"] => Some(Route::Healthz),
        ["api"] => Some(Route::CoreVersions),
        ["apis"] => Some(Route::Groups),
        ["apis", g] => Some(Route::Group(g.to_string())),
        ["api", v] => known_gv("", v).then(|| Route::GroupVersion(String::new(), v.to_string())),
        ["apis", g, v] => known_gv(g, v).then(|| Route::GroupVersion(g.to_string(), v.to_string())),
        ["openapi", "v3"] => Some(Route::OpenApiV3Root),
        ["openapi", "v3", rest @ ..] => Some(Route::OpenApiV3(rest.join("/"))),
        ["openapi", "v2"] | ["swagger.json"] => Some(Route::OpenApiV2),
        ["api", v, rest @ ..] => resource_route("", v, rest),
        ["apis", g, v, rest @ ..] => resource_route(g, v, rest),
        _ => None,
    }
}

fn known_gv(group: &str, version: &str) -> bool {
    resources::RESOURCES
        .iter()
        .any(|r| r.group == group && r.version == version)
}

fn resource_route(group: &str, version: &str, rest: &[&str]) -> Option<Route> {
    let lookup = |plural: &str| resources::lookup(group, version, plural);
    let route = |res, namespace: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        Some(Route::Resource(ResourceRoute {
            res,
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            subresource: sub.map(str::to_string),
        }))
    };
    match rest {
        // `/api/v1/namespaces/<ns>/status` addresses the Namespace itself.
        ["namespaces", name, sub @ ("status" | "finalize")] if group.is_empty() => {
            route(resources::NAMESPACE, None, Some(name), Some(sub))
        }
        ["namespaces", ns, plural, tail @ ..] => {
            let res = lookup(plural)?;
            if !resources::RESOURCES[res].namespaced {
                return None;
            }
            match tail {
                [] => route(res, Some(ns), None, None),
                [name] => route(res, Some(ns), Some(name), None),
                [name, sub] => route(res, Some(ns), Some(name), Some(sub)),
                _ => None,
            }
        }
        [plural] => route(lookup(plural)?, None, None, None),
        [plural, name] => {
            let res = lookup(plural)?;
            // Namespaced objects are only addressable under their namespace.
            (!resources::RESOURCES[res].namespaced).then_some(())?;
            route(res, None, Some(name), None)
        }
        [plural, name, sub] => {
            let res = lookup(plural)?;
            (!resources::RESOURCES[res].namespaced).then_some(())?;
            route(res, None, Some(name), Some(sub))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(
            parse("/api/v1/namespaces/default/persistentvolumeclaims/c/status"),
            Some(Route::Resource(ResourceRoute {
                res: resources::PVC,
                namespace: Some("default".into()),
                name: Some("c".into()),
                subresource: Some("status".into()),
            }))
        );
        assert!(
            matches!(parse("/api/v1/namespaces/default"), Some(Route::Resource(r)) if r.res == resources::NAMESPACE && r.name.as_deref() == Some("default"))
        );
        assert!(
            matches!(parse("/apis/storage.k8s.io/v1/storageclasses"), Some(Route::Resource(r)) if r.res == resources::STORAGE_CLASS)
        );
        assert_eq!(parse("/api/v1/widgets"), None);
        assert_eq!(parse("/api/v1/persistentvolumeclaims/x"), None);
    }
}
