//! Strategic merge patch for the served types: a JSON merge patch, except for
//! the lists whose Go types declare `patchStrategy: merge` (merged by key or as
//! a set) and the `$patch` / `$retainKeys` / `$setElementOrder` /
//! `$deleteFromPrimitiveList` directives that kubectl sends.

use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ListStrategy {
    /// Atomic: the patch's list replaces the object's.
    Replace,
    /// A set of scalars (e.g. `metadata.finalizers`).
    Set,
    /// Items are objects merged by this key.
    MergeByKey(&'static str),
}

/// `patchStrategy`/`patchMergeKey` of the list at `path` (field names only).
fn strategy(path: &[String]) -> ListStrategy {
    let p: Vec<&str> = path.iter().map(String::as_str).collect();
    use ListStrategy::*;
    match p.as_slice() {
        ["metadata", "finalizers"] => Set,
        ["metadata", "ownerReferences"] => MergeByKey("uid"),
        ["status", "conditions"] => MergeByKey("type"),
        ["status", "addresses"] => MergeByKey("type"),
        ["status", "volumesAttached"] => MergeByKey("name"),
        ["spec", "containers"] | ["spec", "initContainers"] | ["spec", "ephemeralContainers"] => {
            MergeByKey("name")
        }
        ["spec", "volumes"] | ["spec", "imagePullSecrets"] => MergeByKey("name"),
        ["spec", "containers" | "initContainers", "env"] => MergeByKey("name"),
        ["spec", "containers" | "initContainers", "ports"] => MergeByKey("containerPort"),
        ["spec", "containers" | "initContainers", "volumeMounts"] => MergeByKey("mountPath"),
        ["spec", "containers" | "initContainers", "volumeDevices"] => MergeByKey("devicePath"),
        _ => Replace,
    }
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::BadRequest(msg.into())
}

/// Apply a strategic merge patch onto `target` in place.
pub fn apply(target: &mut Value, patch: &Value) -> ApiResult<()> {
    merge_map(target, patch, &mut Vec::new())
}

fn merge_map(target: &mut Value, patch: &Value, path: &mut Vec<String>) -> ApiResult<()> {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *target = Value::Object(strip_directives(p));
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Null;
            return Ok(());
        }
        Some(other) if other != "merge" => return Err(bad(format!("Unknown patch type: {other}"))),
        _ => {}
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(t) = target else {
        return Ok(());
    };

    if let Some(keep) = p.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        t.retain(|k, _| keep.contains(&k.as_str()));
    }
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(del)) = (t.get_mut(field), v) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() {
            t.remove(k);
            continue;
        }
        path.push(k.clone());
        match v {
            Value::Object(_) => {
                let slot = t.entry(k.clone()).or_insert(Value::Null);
                merge_map(slot, v, path)?;
                if slot.is_null() {
                    t.remove(k);
                }
            }
            Value::Array(items) => {
                let slot = t.entry(k.clone()).or_insert(Value::Array(Vec::new()));
                merge_list(slot, items, strategy(path), path)?;
            }
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
        path.pop();
    }
    // `$setElementOrder/<list>`: reorder merged lists as the patch asks.
    for (k, v) in p {
        if let (Some(field), Value::Array(order)) = (k.strip_prefix("$setElementOrder/"), v) {
            if let Some(Value::Array(list)) = t.get_mut(field) {
                reorder(list, order);
            }
        }
    }
    Ok(())
}

fn strip_directives(p: &Map<String, Value>) -> Map<String, Value> {
    p.iter()
        .filter(|(k, _)| !k.starts_with('$'))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn reorder(list: &mut [Value], order: &[Value]) {
    let position = |item: &Value| {
        order.iter().position(|o| match (o, item) {
            (Value::Object(om), Value::Object(im)) => om.iter().all(|(k, v)| im.get(k) == Some(v)),
            _ => o == item,
        })
    };
    // Stable: listed items in the given order, unlisted ones after, as they were.
    list.sort_by_key(|item| position(item).unwrap_or(usize::MAX));
}

fn merge_list(
    target: &mut Value,
    items: &[Value],
    strategy: ListStrategy,
    path: &mut Vec<String>,
) -> ApiResult<()> {
    if strategy == ListStrategy::Replace || !target.is_array() {
        *target = Value::Array(
            items
                .iter()
                .filter(|i| !is_directive_item(i))
                .cloned()
                .collect(),
        );
        return Ok(());
    }
    let Value::Array(list) = target else {
        return Ok(());
    };
    match strategy {
        ListStrategy::Set => {
            for item in items {
                if !list.contains(item) {
                    list.push(item.clone());
                }
            }
        }
        ListStrategy::MergeByKey(key) => {
            if items
                .iter()
                .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
            {
                *list = items
                    .iter()
                    .filter(|i| !is_directive_item(i))
                    .cloned()
                    .collect();
                return Ok(());
            }
            for item in items {
                let k = item.get(key).ok_or_else(|| {
                    bad(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    ))
                })?;
                let pos = list.iter().position(|x| x.get(key) == Some(k));
                if item.get("$patch").and_then(Value::as_str) == Some("delete") {
                    if let Some(pos) = pos {
                        list.remove(pos);
                    }
                    continue;
                }
                match pos {
                    Some(pos) => merge_map(&mut list[pos], item, path)?,
                    None => {
                        let mut fresh = Value::Object(Map::new());
                        merge_map(&mut fresh, item, path)?;
                        list.push(fresh);
                    }
                }
            }
        }
        ListStrategy::Replace => {}
    }
    Ok(())
}

fn is_directive_item(v: &Value) -> bool {
    v.get("$patch").is_some()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn finalizers_are_a_set_and_conditions_merge_by_type() {
        let mut t = json!({
            "metadata": {"finalizers": ["a"], "labels": {"x": "1"}},
            "status": {"conditions": [{"type": "Resizing", "status": "True"}]}
        });
        super::apply(
            &mut t,
            &json!({
                "metadata": {"finalizers": ["b", "a"], "labels": {"x": null, "y": "2"}},
                "status": {"conditions": [{"type": "Resizing", "status": "False"}, {"type": "Other", "status": "True"}]}
            }),
        )
        .unwrap();
        assert_eq!(t["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(t["metadata"]["labels"], json!({"y": "2"}));
        assert_eq!(t["status"]["conditions"][0]["status"], "False");
        assert_eq!(t["status"]["conditions"].as_array().map(Vec::len), Some(2));

        super::apply(
            &mut t,
            &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(t["metadata"]["finalizers"], json!(["b"]));
        super::apply(&mut t, &json!({"spec": {"accessModes": ["ReadWriteOnce"]}})).unwrap();
        super::apply(&mut t, &json!({"spec": {"accessModes": ["ReadOnlyMany"]}})).unwrap();
        assert_eq!(t["spec"]["accessModes"], json!(["ReadOnlyMany"]));
    }
}
