//! Namespace controller: empties a terminating namespace, then removes it.

use std::sync::Arc;

use crate::objects;
use crate::registry::{DeleteOpts, Registry};
use crate::resources::{NAMESPACE, RESOURCES};

pub struct NamespaceController {
    registry: Arc<Registry>,
}

impl NamespaceController {
    pub fn new(registry: Arc<Registry>) -> Self {
        NamespaceController { registry }
    }

    pub fn sync(&self, name: &str) {
        let Ok(ns) = self.registry.get(NAMESPACE, "", name) else {
            return;
        };
        if !objects::is_deleting(&ns) {
            return;
        }
        for (res, _) in RESOURCES.iter().enumerate().filter(|(_, d)| d.namespaced) {
            for obj in self.registry.store.all(res, Some(name)) {
                if !objects::is_deleting(&obj) {
                    let _ = self.registry.delete(
                        res,
                        name,
                        objects::name(&obj),
                        &DeleteOpts::default(),
                    );
                }
            }
        }
        // Objects still held by finalizers keep the namespace until they go.
        let left = RESOURCES
            .iter()
            .enumerate()
            .filter(|(_, d)| d.namespaced)
            .any(|(res, _)| !self.registry.store.all(res, Some(name)).is_empty());
        if !left {
            let _ = self.registry.finalize_namespace(name);
        }
    }

    pub fn resync(&self) {
        for ns in self.registry.store.all(NAMESPACE, None) {
            self.sync(objects::name(&ns));
        }
    }
}
