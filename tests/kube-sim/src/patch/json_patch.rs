//! JSON patch (RFC 6902), failing like kube-apiserver (422) on a failed `test`
//! or a missing path.

use serde_json::Value;

use crate::error::{ApiError, ApiResult};

fn fail(msg: String) -> ApiError {
    ApiError::PatchFailed(msg)
}

fn tokens(pointer: &str) -> ApiResult<Vec<String>> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer.strip_prefix('/').ok_or_else(|| {
        fail(format!(
            "invalid JSON pointer {pointer:?}: must start with '/'"
        ))
    })?;
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn get<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, t| match v {
        Value::Object(m) => m.get(t),
        Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

fn get_mut<'a>(doc: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    path.iter().try_fold(doc, |v, t| match v {
        Value::Object(m) => m.get_mut(t),
        Value::Array(a) => t.parse::<usize>().ok().and_then(move |i| a.get_mut(i)),
        _ => None,
    })
}

fn add(doc: &mut Value, path: &[String], value: Value, pointer: &str) -> ApiResult<()> {
    let Some((last, parent)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    let parent = get_mut(doc, parent).ok_or_else(|| {
        fail(format!(
            "add operation does not apply: doc is missing path: {pointer:?}"
        ))
    })?;
    match parent {
        Value::Object(m) => {
            m.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(a) => {
            let idx = if last == "-" {
                a.len()
            } else {
                last.parse::<usize>()
                    .ok()
                    .filter(|i| *i <= a.len())
                    .ok_or_else(|| {
                        fail(format!(
                            "add operation does not apply: index out of range: {pointer:?}"
                        ))
                    })?
            };
            a.insert(idx, value);
            Ok(())
        }
        _ => Err(fail(format!(
            "add operation does not apply: doc is missing path: {pointer:?}"
        ))),
    }
}

fn remove(doc: &mut Value, path: &[String], pointer: &str) -> ApiResult<Value> {
    let missing = || {
        fail(format!(
            "remove operation does not apply: doc is missing path: {pointer:?}"
        ))
    };
    let (last, parent) = path.split_last().ok_or_else(missing)?;
    match get_mut(doc, parent).ok_or_else(missing)? {
        Value::Object(m) => m.remove(last).ok_or_else(missing),
        Value::Array(a) => {
            let i = last
                .parse::<usize>()
                .ok()
                .filter(|i| *i < a.len())
                .ok_or_else(missing)?;
            Ok(a.remove(i))
        }
        _ => Err(missing()),
    }
}

/// Apply a JSON patch document (an array of operations) to `doc`.
pub fn apply(doc: &mut Value, patch: &Value) -> ApiResult<()> {
    let ops = patch
        .as_array()
        .ok_or_else(|| ApiError::BadRequest("json patch must be an array of operations".into()))?;
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or("");
        let pointer = op.get("path").and_then(Value::as_str).unwrap_or("");
        let path = tokens(pointer)?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| fail(format!("{kind} operation at {pointer:?} has no value")))
        };
        let from = || -> ApiResult<(String, Vec<String>)> {
            let f = op
                .get("from")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let t = tokens(&f)?;
            Ok((f, t))
        };
        match kind {
            "add" => add(doc, &path, value()?, pointer)?,
            "remove" => {
                remove(doc, &path, pointer)?;
            }
            "replace" => {
                let v = value()?;
                let slot = get_mut(doc, &path).ok_or_else(|| {
                    fail(format!(
                        "replace operation does not apply: doc is missing key: {pointer}"
                    ))
                })?;
                *slot = v;
            }
            "move" => {
                let (f, ft) = from()?;
                let v = remove(doc, &ft, &f)?;
                add(doc, &path, v, pointer)?;
            }
            "copy" => {
                let (f, ft) = from()?;
                let v = get(doc, &ft).cloned().ok_or_else(|| {
                    fail(format!(
                        "copy operation does not apply: doc is missing from path: {f}"
                    ))
                })?;
                add(doc, &path, v, pointer)?;
            }
            "test" => {
                let want = value()?;
                if get(doc, &path) != Some(&want) {
                    return Err(fail(format!("testing value {pointer} failed: test failed")));
                }
            }
            other => {
                return Err(ApiError::BadRequest(format!(
                    "unexpected kind of operation: {other:?}"
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn ops_and_failed_test() {
        let mut d = json!({"metadata": {"finalizers": ["a"]}});
        super::apply(
            &mut d,
            &json!([
                {"op": "test", "path": "/metadata/finalizers/0", "value": "a"},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "b"},
                {"op": "remove", "path": "/metadata/finalizers/0"},
                {"op": "add", "path": "/metadata/labels", "value": {"x/y": "1"}},
                {"op": "replace", "path": "/metadata/labels/x~1y", "value": "2"}
            ]),
        )
        .unwrap();
        assert_eq!(
            d,
            json!({"metadata": {"finalizers": ["b"], "labels": {"x/y": "2"}}})
        );
        let err = super::apply(
            &mut d,
            &json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "zz"}]),
        )
        .unwrap_err();
        assert_eq!(err.code(), 422);
    }
}
