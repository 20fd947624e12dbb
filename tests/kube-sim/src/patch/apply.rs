//! Server-side apply and `metadata.managedFields` bookkeeping.
//!
//! A simplified structured-merge-diff: field ownership is tracked per manager
//! at leaf granularity, with every list atomic except `metadata.finalizers`
//! (a set). That is what `kubectl apply --server-side` needs on these types:
//! creation of missing objects, conflicts with other managers (409 unless
//! `force=true`), and removal of fields a manager stopped applying.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult, Cause};
use crate::objects;

type Path = Vec<String>;

/// Metadata fields the server owns; never tracked.
const SERVER_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

/// Leaf paths set in `obj` (for the main resource or the `status` subresource).
fn leaves(obj: &Value, status: bool) -> BTreeSet<Path> {
    let mut out = BTreeSet::new();
    if let Value::Object(m) = obj {
        for (k, v) in m {
            let take = match k.as_str() {
                "apiVersion" | "kind" => false,
                "status" => status,
                _ => !status,
            };
            if take {
                walk(v, &mut vec![k.clone()], &mut out);
            }
        }
    }
    out
}

fn walk(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                if path.len() == 1 && path[0] == "metadata" && SERVER_META.contains(&k.as_str()) {
                    continue;
                }
                path.push(k.clone());
                walk(child, path, out);
                path.pop();
            }
        }
        Value::Null => {}
        _ => {
            out.insert(path.clone());
        }
    }
}

fn get<'a>(obj: &'a Value, path: &Path) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k))
}

fn remove(obj: &mut Value, path: &Path) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for k in parent {
        match cur.get_mut(k) {
            Some(v) => cur = v,
            None => return,
        }
    }
    if let Value::Object(m) = cur {
        m.remove(last);
    }
}

fn to_fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for p in paths {
        let mut cur = &mut root;
        for k in p {
            let entry = cur
                .entry(format!("f:{k}"))
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            cur = match entry.as_object_mut() {
                Some(m) => m,
                None => break,
            };
        }
    }
    Value::Object(root)
}

fn from_fields_v1(v: &Value, path: &mut Path, out: &mut BTreeSet<Path>) {
    let Value::Object(m) = v else { return };
    let children: Vec<_> = m
        .iter()
        .filter_map(|(k, v)| k.strip_prefix("f:").map(|k| (k, v)))
        .collect();
    if children.is_empty() && !path.is_empty() {
        out.insert(path.clone());
    }
    for (k, child) in children {
        path.push(k.to_string());
        from_fields_v1(child, path, out);
        path.pop();
    }
}

struct Entry {
    manager: String,
    operation: String,
    subresource: String,
    api_version: String,
    time: String,
    fields: BTreeSet<Path>,
}

fn parse_entry(e: &Value) -> Entry {
    let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut fields = BTreeSet::new();
    if let Some(f) = e.get("fieldsV1") {
        from_fields_v1(f, &mut Vec::new(), &mut fields);
    }
    Entry {
        manager: s("manager"),
        operation: s("operation"),
        subresource: s("subresource"),
        api_version: s("apiVersion"),
        time: s("time"),
        fields,
    }
}

fn read_entries(obj: &Value) -> Vec<Entry> {
    objects::meta(obj)
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .map(|list| list.iter().map(parse_entry).collect())
        .unwrap_or_default()
}

fn render_entries(entries: Vec<Entry>) -> Vec<Value> {
    entries
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect()
}

fn store_entries(obj: &mut Value, list: Vec<Value>) {
    let m = objects::meta_mut(obj);
    if list.is_empty() {
        m.remove("managedFields");
    } else {
        m.insert("managedFields".into(), Value::Array(list));
    }
}

fn write_entries(obj: &mut Value, entries: Vec<Entry>) {
    store_entries(obj, render_entries(entries));
}

/// Who wrote what: record an `Update` by `manager` that turned `old` into `new`.
/// Only entries of the same subresource are parsed and rewritten; the others
/// are kept verbatim (status writes are frequent and must stay cheap).
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: &str,
    now: &str,
) {
    let status = subresource == "status";
    let present = leaves(new, status);
    let changed: BTreeSet<Path> = present
        .iter()
        .filter(|p| old.is_none_or(|o| get(o, p) != get(new, p)))
        .cloned()
        .collect();
    let raw: Vec<Value> = objects::meta(new)
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let (mine, others): (Vec<Value>, Vec<Value>) = raw
        .into_iter()
        .partition(|e| e.get("subresource").and_then(Value::as_str).unwrap_or("") == subresource);
    let mut entries: Vec<Entry> = mine.iter().map(parse_entry).collect();
    let mut touched = !changed.is_empty();
    for e in &mut entries {
        let before = e.fields.len();
        e.fields
            .retain(|p| present.contains(p) && !changed.contains(p));
        touched |= e.fields.len() != before;
    }
    if !touched {
        return;
    }
    if !changed.is_empty() {
        match entries
            .iter_mut()
            .find(|e| e.manager == manager && e.operation == "Update")
        {
            Some(e) => {
                e.fields.extend(changed);
                e.time = now.to_string();
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                subresource: subresource.to_string(),
                api_version: new
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or("v1")
                    .to_string(),
                time: now.to_string(),
                fields: changed,
            }),
        }
    }
    let mut list = others;
    list.extend(render_entries(entries));
    store_entries(new, list);
}

/// Deep-merge an applied configuration into the live object.
fn merge_applied(target: &mut Value, applied: &Value, path: &mut Path) {
    match (target, applied) {
        (Value::Object(t), Value::Object(a)) => {
            for (k, v) in a {
                if v.is_null() {
                    continue;
                }
                path.push(k.clone());
                match t.get_mut(k) {
                    Some(slot) => merge_applied(slot, v, path),
                    None => {
                        t.insert(k.clone(), v.clone());
                    }
                }
                path.pop();
            }
        }
        (Value::Array(t), Value::Array(a)) if path.as_slice() == ["metadata", "finalizers"] => {
            for v in a {
                if !t.contains(v) {
                    t.push(v.clone());
                }
            }
        }
        (t, a) => *t = a.clone(),
    }
}

/// Server-side apply of `applied` by `manager` onto `live` (None: the object is created).
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    now: &str,
) -> ApiResult<Value> {
    let api_version = applied
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("v1")
        .to_string();
    let mine = leaves(applied, false);
    let Some(live) = live else {
        let mut obj = applied.clone();
        write_entries(
            &mut obj,
            vec![Entry {
                manager: manager.into(),
                operation: "Apply".into(),
                subresource: String::new(),
                api_version,
                time: now.into(),
                fields: mine,
            }],
        );
        return Ok(obj);
    };

    let mut entries = read_entries(live);
    let is_me =
        |e: &Entry| e.manager == manager && e.operation == "Apply" && e.subresource.is_empty();

    // Conflicts: fields I set to a different value that another manager owns.
    let mut conflicts: Vec<Cause> = Vec::new();
    for p in &mine {
        if get(live, p) == get(applied, p) {
            continue;
        }
        for e in entries
            .iter()
            .filter(|e| !is_me(e) && e.subresource.is_empty())
        {
            if e.fields.contains(p) {
                // A manager that updated (not applied) is named with the
                // version it wrote, as kube-apiserver words it.
                let using = if e.operation == "Update" {
                    format!(" using {}", e.api_version)
                } else {
                    String::new()
                };
                conflicts.push(Cause {
                    reason: "FieldManagerConflict".into(),
                    message: format!("conflict with \"{}\"{using}", e.manager),
                    field: format!(".{}", p.join(".")),
                });
            }
        }
    }
    if !conflicts.is_empty() && !force {
        let n = conflicts.len();
        let listed: Vec<String> = conflicts
            .iter()
            .map(|c| format!("{}: {}", c.message, c.field))
            .collect();
        return Err(ApiError::ApplyConflict {
            message: format!(
                "Apply failed with {n} conflict{}: {}",
                if n == 1 { "" } else { "s" },
                listed.join("\n")
            ),
            causes: conflicts,
        });
    }

    let mut obj = live.clone();
    // Fields I applied before and no longer apply, and nobody else owns, go away.
    let previous = entries
        .iter()
        .find(|e| is_me(e))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    for p in previous.difference(&mine) {
        let owned_elsewhere = entries.iter().any(|e| !is_me(e) && e.fields.contains(p));
        if !owned_elsewhere {
            remove(&mut obj, p);
        }
    }
    merge_applied(&mut obj, applied, &mut Vec::new());

    for e in entries
        .iter_mut()
        .filter(|e| !is_me(e) && e.subresource.is_empty())
    {
        // Changed values (forced or not conflicting because equal) move to me only when forced.
        if force {
            e.fields.retain(|p| !mine.contains(p));
        }
    }
    match entries.iter_mut().find(|e| is_me(e)) {
        Some(e) => {
            e.fields = mine;
            e.time = now.into();
            e.api_version = api_version;
        }
        None => entries.push(Entry {
            manager: manager.into(),
            operation: "Apply".into(),
            subresource: String::new(),
            api_version,
            time: now.into(),
            fields: mine,
        }),
    }
    write_entries(&mut obj, entries);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_creates_conflicts_and_prunes() {
        let a1 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}});
        let live = apply(None, &a1, "kubectl", false, "now").unwrap();
        assert_eq!(live["data"], json!({"a": "1", "b": "2"}));

        // Another manager changes `a` with an update: applying a different value conflicts.
        let mut live2 = live.clone();
        live2["data"]["a"] = json!("9");
        record_update(Some(&live), &mut live2, "editor", "", "now");
        let a2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        let err = apply(Some(&live2), &a2, "kubectl", false, "now").unwrap_err();
        assert_eq!(err.code(), 409);
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"editor\" using v1: .data.a"
        );
        assert_eq!(err.to_status()["details"]["causes"][0]["field"], ".data.a");

        // Forced: value taken over, and `b` (no longer applied, owned by nobody else) pruned.
        let live3 = apply(Some(&live2), &a2, "kubectl", true, "now").unwrap();
        assert_eq!(live3["data"], json!({"a": "1"}));
    }
}
