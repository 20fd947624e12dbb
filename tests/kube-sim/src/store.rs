//! Versioned object store with a bounded watch history (what etcd + the watch
//! cache are to kube-apiserver).
//!
//! One global, monotonically increasing revision: every write gets the next
//! revision as `metadata.resourceVersion`. Writes are serialised under one mutex
//! and broadcast while the lock is held, so every watcher sees events in
//! revision order with no gap between its backlog and the live feed.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::error::{ApiError, ApiResult};
use crate::objects;
use crate::resources::{ResourceId, RESOURCES};

/// `(namespace, name)`; namespace is "" for cluster-scoped objects.
pub type Key = (String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the history and sent to watchers.
#[derive(Debug)]
pub struct Event {
    pub kind: EventType,
    pub resource: ResourceId,
    pub rv: u64,
    pub object: Arc<Value>,
    /// The object before this change (None for `Added`).
    pub prev: Option<Arc<Value>>,
    line: OnceLock<Bytes>,
}

impl Event {
    fn new(
        kind: EventType,
        resource: ResourceId,
        rv: u64,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) -> Self {
        Event {
            kind,
            resource,
            rv,
            object,
            prev,
            line: OnceLock::new(),
        }
    }

    pub fn key(&self) -> Key {
        (
            objects::namespace(&self.object).to_string(),
            objects::name(&self.object).to_string(),
        )
    }

    /// The watch line `{"type":…,"object":…}\n`, serialised once for all watchers.
    pub fn line(&self) -> &Bytes {
        self.line
            .get_or_init(|| watch_line(self.kind.as_str(), &self.object))
    }
}

pub fn watch_line(kind: &str, object: &Value) -> Bytes {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    // Serialising a `Value` cannot fail (keys are strings).
    let _ = serde_json::to_writer(&mut out, object);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

/// What a transaction decides to do with the object it looked at.
pub enum Change {
    /// Store this object (create or update).
    Put(Value),
    /// The last finalizer was removed from a deleting object: delete it as
    /// stored, without writing this emptied version (as kube-apiserver does:
    /// the DELETED event still shows the finalizers), and answer with this
    /// version at the last stored revision.
    DeleteEmptied(Value),
    /// Delete the current object.
    Delete,
    /// Leave it as is.
    Nothing,
}

/// A registered watch: events after `start_rv` from history, then the live feed.
pub struct Subscription {
    pub backlog: Vec<Arc<Event>>,
    pub live: broadcast::Receiver<Arc<Event>>,
    pub start_rv: u64,
}

/// A page of a list.
pub struct Page {
    pub items: Vec<Arc<Value>>,
    pub rv: u64,
    /// Key of the last returned item when more items match.
    pub next: Option<Key>,
    pub remaining: usize,
}

/// Requested revision is older than the retained history.
#[derive(Debug, Clone, Copy)]
pub struct TooOld {
    pub requested: u64,
    pub oldest: u64,
}

struct Inner {
    rv: u64,
    objects: Vec<BTreeMap<Key, Arc<Value>>>,
    history: VecDeque<Arc<Event>>,
    window: usize,
    /// Every event with `rv <= compacted` has been forgotten.
    compacted: u64,
}

pub struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Arc<Event>>,
}

/// How many events a watcher may fall behind the writers before it is dropped
/// (it then re-watches from its last revision, like after a real watch-cache overflow).
const LIVE_BUFFER: usize = 32 * 1024;

impl Store {
    pub fn new(history_window: usize) -> Self {
        let (events, _) = broadcast::channel(LIVE_BUFFER);
        Store {
            inner: Mutex::new(Inner {
                rv: 1,
                objects: RESOURCES.iter().map(|_| BTreeMap::new()).collect(),
                history: VecDeque::new(),
                window: history_window.max(1),
                compacted: 1,
            }),
            events,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-written
        // (every write is a single insert/remove), so poisoning is ignored.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn get(&self, res: ResourceId, key: &Key) -> Option<Arc<Value>> {
        self.lock().objects[res].get(key).cloned()
    }

    /// All current objects of a resource (optionally in one namespace).
    pub fn all(&self, res: ResourceId, ns: Option<&str>) -> Vec<Arc<Value>> {
        let inner = self.lock();
        match ns {
            Some(ns) => range_ns(&inner.objects[res], ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => inner.objects[res].values().cloned().collect(),
        }
    }

    /// Look at the current object under the lock and apply the decided change
    /// atomically. Returns the stored (or deleted) object, or None for `Nothing`
    /// on a missing object.
    pub fn transact<F>(
        &self,
        res: ResourceId,
        key: &Key,
        decide: F,
    ) -> ApiResult<Option<Arc<Value>>>
    where
        F: FnOnce(Option<&Arc<Value>>) -> ApiResult<Change>,
    {
        let mut inner = self.lock();
        let current = inner.objects[res].get(key).cloned();
        match decide(current.as_ref())? {
            Change::Nothing => Ok(current),
            Change::Put(obj) => Ok(Some(self.put(&mut inner, res, key, obj, current))),
            Change::DeleteEmptied(mut obj) => {
                let cur = current
                    .ok_or_else(|| ApiError::Internal("finalizing a missing object".into()))?;
                if let Some(rv) = objects::meta(&cur).and_then(|m| m.get("resourceVersion")) {
                    objects::meta_mut(&mut obj).insert("resourceVersion".into(), rv.clone());
                }
                self.delete(&mut inner, res, key, cur);
                Ok(Some(Arc::new(obj)))
            }
            Change::Delete => match current {
                Some(cur) => Ok(Some(self.delete(&mut inner, res, key, cur))),
                None => Err(ApiError::Internal("delete of a missing object".into())),
            },
        }
    }

    fn put(
        &self,
        inner: &mut Inner,
        res: ResourceId,
        key: &Key,
        mut obj: Value,
        prev: Option<Arc<Value>>,
    ) -> Arc<Value> {
        inner.rv += 1;
        let rv = inner.rv;
        objects::meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(rv.to_string()));
        let obj = Arc::new(obj);
        inner.objects[res].insert(key.clone(), obj.clone());
        let kind = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(inner, Event::new(kind, res, rv, obj.clone(), prev));
        obj
    }

    fn delete(
        &self,
        inner: &mut Inner,
        res: ResourceId,
        key: &Key,
        prev: Arc<Value>,
    ) -> Arc<Value> {
        inner.rv += 1;
        let rv = inner.rv;
        inner.objects[res].remove(key);
        // The DELETED event carries the deletion revision, as the real server's does.
        let mut last = (*prev).clone();
        objects::meta_mut(&mut last)
            .insert("resourceVersion".into(), Value::String(rv.to_string()));
        let last = Arc::new(last);
        self.record(
            inner,
            Event::new(EventType::Deleted, res, rv, last.clone(), Some(prev)),
        );
        last
    }

    fn record(&self, inner: &mut Inner, event: Event) {
        let event = Arc::new(event);
        inner.history.push_back(event.clone());
        while inner.history.len() > inner.window {
            if let Some(old) = inner.history.pop_front() {
                inner.compacted = old.rv;
            }
        }
        // No receivers is fine.
        let _ = self.events.send(event);
    }

    /// Forget all history: watches resuming from any earlier revision get 410.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.history.clear();
        inner.compacted = inner.rv;
    }

    pub fn set_history_window(&self, window: usize) {
        let mut inner = self.lock();
        inner.window = window.max(1);
        while inner.history.len() > inner.window {
            if let Some(old) = inner.history.pop_front() {
                inner.compacted = old.rv;
            }
        }
    }

    /// Live feed of every change (for the built-in controllers).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.events.subscribe()
    }

    /// Watch `res` from revision `rv` (exclusive).
    pub fn watch_from(&self, res: ResourceId, rv: u64) -> Result<Subscription, TooOld> {
        let inner = self.lock();
        if rv < inner.compacted {
            return Err(TooOld {
                requested: rv,
                oldest: inner.compacted + 1,
            });
        }
        let backlog = inner
            .history
            .iter()
            .filter(|e| e.rv > rv && e.resource == res)
            .cloned()
            .collect();
        Ok(Subscription {
            backlog,
            live: self.events.subscribe(),
            start_rv: rv.max(inner.compacted).min(inner.rv),
        })
    }

    /// Watch starting now, with the current objects as a snapshot.
    pub fn watch_now(&self, res: ResourceId, ns: Option<&str>) -> (Vec<Arc<Value>>, Subscription) {
        let inner = self.lock();
        let snapshot = match ns {
            Some(ns) => range_ns(&inner.objects[res], ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => inner.objects[res].values().cloned().collect(),
        };
        (
            snapshot,
            Subscription {
                backlog: Vec::new(),
                live: self.events.subscribe(),
                start_rv: inner.rv,
            },
        )
    }

    /// One page of a consistent list, at the current revision or at `snapshot`
    /// (a continue token's revision or `resourceVersionMatch=Exact`).
    pub fn list(
        &self,
        res: ResourceId,
        ns: Option<&str>,
        snapshot: Option<u64>,
        start_after: Option<&Key>,
        limit: Option<usize>,
        filter: &dyn Fn(&Value) -> bool,
    ) -> ApiResult<Page> {
        let inner = self.lock();
        let at = snapshot.unwrap_or(inner.rv);
        if at > inner.rv {
            return Err(ApiError::Internal(format!(
                "Too large resource version: {at}, current: {}",
                inner.rv
            )));
        }
        let map = &inner.objects[res];
        let in_scope = |k: &Key| ns.is_none_or(|ns| k.0 == ns);
        let after = |k: &Key| start_after.is_none_or(|s| k > s);

        // Objects changed since the snapshot: their state at `at` is the `prev`
        // of the oldest later event (None = did not exist yet).
        let mut past: BTreeMap<Key, Option<Arc<Value>>> = BTreeMap::new();
        if at < inner.rv {
            if at < inner.compacted {
                return Err(ApiError::Expired(format!(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list. (requested {at}, oldest {})",
                    inner.compacted + 1
                )));
            }
            for e in inner
                .history
                .iter()
                .filter(|e| e.rv > at && e.resource == res)
            {
                past.entry(e.key()).or_insert_with(|| e.prev.clone());
            }
        }

        let merged_vec: Vec<(Key, Arc<Value>)>;
        let mut merged: Box<dyn Iterator<Item = (&Key, &Arc<Value>)>> = Box::new(match ns {
            Some(ns) => Box::new(range_ns(map, ns)) as Box<dyn Iterator<Item = _>>,
            None => Box::new(map.iter()),
        });
        if !past.is_empty() {
            let mut view: BTreeMap<Key, Arc<Value>> =
                merged.map(|(k, v)| (k.clone(), v.clone())).collect();
            for (k, v) in past {
                match v {
                    Some(v) => view.insert(k, v),
                    None => view.remove(&k),
                };
            }
            merged_vec = view.into_iter().collect();
            merged = Box::new(merged_vec.iter().map(|(k, v)| (k, v)));
        }

        let mut items = Vec::new();
        let mut next = None;
        let mut remaining = 0;
        for (k, v) in merged.filter(|(k, _)| in_scope(k) && after(k)) {
            if !filter(v) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                remaining += 1;
                continue;
            }
            items.push(v.clone());
            next = Some(k.clone());
        }
        Ok(Page {
            items,
            rv: at,
            next: if remaining > 0 { next } else { None },
            remaining,
        })
    }
}

fn range_ns<'a>(
    map: &'a BTreeMap<Key, Arc<Value>>,
    ns: &str,
) -> impl Iterator<Item = (&'a Key, &'a Arc<Value>)> + 'a {
    let ns_owned = ns.to_string();
    map.range((ns.to_string(), String::new())..)
        .take_while(move |(k, _)| k.0 == ns_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::CONFIG_MAP;
    use serde_json::json;

    fn put(store: &Store, name: &str, data: &str) -> u64 {
        let key = ("default".to_string(), name.to_string());
        let obj = json!({"metadata": {"name": name, "namespace": "default"}, "data": {"v": data}});
        let stored = store
            .transact(CONFIG_MAP, &key, |_| Ok(Change::Put(obj)))
            .unwrap()
            .unwrap();
        objects::resource_version(&stored).unwrap().parse().unwrap()
    }

    #[test]
    fn history_window_and_too_old() {
        let store = Store::new(3);
        let first = put(&store, "a", "1");
        for i in 0..3 {
            put(&store, "b", &i.to_string());
        }
        // Four events, window of three: the event at `first` is forgotten,
        // but watching *from* it still works (only later events are needed).
        assert!(store.watch_from(CONFIG_MAP, first).is_ok());
        let err = store
            .watch_from(CONFIG_MAP, first - 1)
            .err()
            .expect("too old");
        assert_eq!(err.oldest, first + 1);
        store.compact();
        assert!(store.watch_from(CONFIG_MAP, first).is_err());
        assert!(store.watch_from(CONFIG_MAP, store.current_rv()).is_ok());
    }

    #[test]
    fn list_snapshots_undo_later_changes() {
        let store = Store::new(100);
        put(&store, "a", "1");
        let at = put(&store, "b", "1");
        put(&store, "a", "2");
        put(&store, "c", "1");
        let key = ("default".to_string(), "b".to_string());
        store
            .transact(CONFIG_MAP, &key, |_| Ok(Change::Delete))
            .unwrap();
        let page = store
            .list(CONFIG_MAP, Some("default"), Some(at), None, None, &|_| true)
            .unwrap();
        let seen: Vec<(String, String)> = page
            .items
            .iter()
            .map(|o| {
                (
                    objects::name(o).to_string(),
                    o["data"]["v"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        assert_eq!(seen, [("a".into(), "1".into()), ("b".into(), "1".into())]);
        assert_eq!(page.rv, at);
    }
}
