//! A tiny event recorder: core/v1 Events with the real server's aggregation
//! (a repeat of the same reason and message bumps `count` and `lastTimestamp`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::objects;
use crate::registry::{Registry, Subresource, WriteOpts};
use crate::resources::{self, RESOURCES};
use crate::util;

/// (involved uid, reason, message)
type EventKey = (String, String, String);

pub struct Recorder {
    registry: Arc<Registry>,
    component: &'static str,
    /// Event key → (namespace, event name) of the event to bump.
    seen: Mutex<HashMap<EventKey, (String, String)>>,
    counter: Mutex<u64>,
}

impl Recorder {
    pub fn new(registry: Arc<Registry>, component: &'static str) -> Self {
        Recorder {
            registry,
            component,
            seen: Mutex::new(HashMap::new()),
            counter: Mutex::new(0),
        }
    }

    /// Record an event about `obj` (a stored object of resource `res`).
    pub fn event(&self, res: usize, obj: &Value, kind: &str, reason: &str, message: &str) {
        let def = &RESOURCES[res];
        let uid = objects::uid(obj).to_string();
        // Events about cluster-scoped objects live in "default", as the real recorder puts them.
        let ns = match objects::namespace(obj) {
            "" => "default".to_string(),
            ns => ns.to_string(),
        };
        let key = (uid.clone(), reason.to_string(), message.to_string());
        let now = util::now();
        let existing = self
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .cloned();
        if let Some((ens, ename)) = existing {
            let bumped = self.registry.modify(
                resources::EVENT,
                &ens,
                &ename,
                Subresource::Main,
                self.component,
                |e| {
                    let count = e.get("count").and_then(Value::as_i64).unwrap_or(1);
                    e["count"] = json!(count + 1);
                    e["lastTimestamp"] = json!(now);
                },
            );
            if bumped.is_ok() {
                return;
            }
        }
        let n = {
            let mut c = self.counter.lock().unwrap_or_else(|p| p.into_inner());
            *c += 1;
            *c
        };
        let name = format!(
            "{}.{:016x}",
            objects::name(obj),
            (util::now_seconds() as u64) << 20 | (n & 0xfffff)
        );
        let event = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {
                "kind": def.kind,
                "apiVersion": def.api_version(),
                "namespace": objects::namespace(obj),
                "name": objects::name(obj),
                "uid": uid,
                "resourceVersion": objects::resource_version(obj).unwrap_or(""),
            },
            "reason": reason,
            "message": message,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": "",
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": kind,
        });
        let opts = WriteOpts {
            manager: self.component.to_string(),
            ..WriteOpts::default()
        };
        if let Ok(w) = self.registry.create(resources::EVENT, &ns, event, &opts) {
            self.seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, (ns, objects::name(&w.object).to_string()));
        }
    }
}
