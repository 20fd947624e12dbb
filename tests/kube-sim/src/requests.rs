//! A log of the resource requests clients made, in the terms RBAC uses, so a
//! test can derive the permissions a client needs from what it really did.

use std::sync::Mutex;

/// One resource request, as an RBAC authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ApiRequest {
    /// The bearer token the client sent (`""` without one). The simulator
    /// authenticates nobody: a test gives each client its own token to tell
    /// their requests apart.
    pub user: String,
    /// Kubernetes' RBAC verb: get, list, watch, create, update, patch, delete,
    /// deletecollection.
    pub verb: String,
    /// API group (`""` for core).
    pub api_group: String,
    /// Resource plural, e.g. `persistentvolumes`.
    pub resource: String,
    /// `""`, `status`, …
    pub subresource: String,
    /// `""` for cluster-scoped objects and requests across all namespaces.
    pub namespace: String,
    /// `""` for collection requests (list, watch, create, deletecollection).
    pub name: String,
}

/// Requests recorded when [`crate::Config::record_requests`] is on.
#[derive(Debug, Default)]
pub(crate) struct RequestLog {
    enabled: bool,
    entries: Mutex<Vec<ApiRequest>>,
}

impl RequestLog {
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            entries: Mutex::default(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn record(&self, request: ApiRequest) {
        if self.enabled {
            self.entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(request);
        }
    }

    pub fn snapshot(&self) -> Vec<ApiRequest> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
