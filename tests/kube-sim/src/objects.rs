//! Small accessors for untyped (JSON) Kubernetes objects.

use serde_json::{Map, Value};

pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata").and_then(Value::as_object)
}

/// `metadata`, created if missing (or replaced if it is not an object).
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let map = obj.as_object_mut().expect("checked above");
    let m = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    m.as_object_mut().expect("checked above")
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj)?.get(field)?.as_str().filter(|s| !s.is_empty())
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or("")
}

pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid").unwrap_or("")
}

pub fn resource_version(obj: &Value) -> Option<&str> {
    meta_str(obj, "resourceVersion")
}

pub fn is_deleting(obj: &Value) -> bool {
    meta_str(obj, "deletionTimestamp").is_some()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn set_finalizers(obj: &mut Value, finalizers: Vec<String>) {
    let m = meta_mut(obj);
    if finalizers.is_empty() {
        m.remove("finalizers");
    } else {
        m.insert(
            "finalizers".into(),
            Value::Array(finalizers.into_iter().map(Value::String).collect()),
        );
    }
}

pub fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    meta(obj)?.get("labels")?.as_object()
}

pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    meta(obj)?.get("annotations")?.get(key)?.as_str()
}

pub fn set_annotation(obj: &mut Value, key: &str, value: &str) {
    let m = meta_mut(obj);
    let ann = m
        .entry("annotations")
        .or_insert_with(|| Value::Object(Map::new()));
    if !ann.is_object() {
        *ann = Value::Object(Map::new());
    }
    if let Some(a) = ann.as_object_mut() {
        a.insert(key.into(), Value::String(value.into()));
    }
}

pub fn remove_annotation(obj: &mut Value, key: &str) {
    let m = meta_mut(obj);
    if let Some(a) = m.get_mut("annotations").and_then(Value::as_object_mut) {
        a.remove(key);
        if a.is_empty() {
            m.remove("annotations");
        }
    }
}

/// Value at a dotted path (`spec.claimRef.name`).
pub fn path<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(obj, |v, seg| v.get(seg))
}

pub fn path_str<'a>(obj: &'a Value, dotted: &str) -> Option<&'a str> {
    path(obj, dotted)?.as_str()
}

/// Mutable object at a dotted path, creating intermediate objects.
pub fn path_mut<'a>(obj: &'a mut Value, dotted: &str) -> &'a mut Value {
    let mut cur = obj;
    for seg in dotted.split('.') {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        cur = cur
            .as_object_mut()
            .expect("checked above")
            .entry(seg)
            .or_insert(Value::Null);
    }
    cur
}

/// Set a value at a dotted path, creating intermediate objects.
pub fn set_path(obj: &mut Value, dotted: &str, value: Value) {
    *path_mut(obj, dotted) = value;
}

/// Remove the value at a dotted path (no-op when absent).
pub fn remove_path(obj: &mut Value, dotted: &str) {
    let (parent, last) = match dotted.rsplit_once('.') {
        Some((p, l)) => (p, l),
        None => ("", dotted),
    };
    let parent = if parent.is_empty() {
        Some(obj)
    } else {
        parent.split('.').try_fold(obj, |v, seg| v.get_mut(seg))
    };
    if let Some(Value::Object(m)) = parent {
        m.remove(last);
    }
}

/// Object equality ignoring `metadata.resourceVersion` and `metadata.managedFields`
/// (used to detect no-op writes, which the real server does not persist).
pub fn same_content(a: &Value, b: &Value) -> bool {
    let (Value::Object(a), Value::Object(b)) = (a, b) else {
        return a == b;
    };
    let empty = Map::new();
    let meta_a = a
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let meta_b = b
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let skip = |k: &String| k == "resourceVersion" || k == "managedFields";
    let metas_equal = meta_a.iter().filter(|(k, _)| !skip(k)).count()
        == meta_b.iter().filter(|(k, _)| !skip(k)).count()
        && meta_a
            .iter()
            .filter(|(k, _)| !skip(k))
            .all(|(k, v)| meta_b.get(k) == Some(v));
    metas_equal
        && a.len() == b.len()
        && a.iter()
            .all(|(k, v)| k == "metadata" || b.get(k) == Some(v))
}
