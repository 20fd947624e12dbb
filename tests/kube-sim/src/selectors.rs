//! Label and field selectors, with the real server's grammar and errors.

use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::objects;
use crate::resources::ResourceDef;

#[derive(Debug, Clone, PartialEq)]
enum LabelReq {
    Exists(String),
    NotExists(String),
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

#[derive(Debug, Clone, Default)]
pub struct LabelSelector(Vec<LabelReq>);

/// Split on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(key: &str, rest: &str, raw: &str) -> ApiResult<(String, Vec<String>)> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "unable to parse requirement: found '{raw}', expected: '('"
            ))
        })?;
    let values = inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect();
    Ok((key.trim().to_string(), values))
}

impl LabelSelector {
    pub fn parse(s: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let req = if let Some(k) = part.strip_prefix('!') {
                LabelReq::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                let (k, vs) = parse_set(k, rest, part)?;
                LabelReq::NotIn(k, vs)
            } else if let Some((k, rest)) = part.split_once(" in ") {
                let (k, vs) = parse_set(k, rest, part)?;
                LabelReq::In(k, vs)
            } else if part.contains(' ') || part.contains('(') {
                return Err(ApiError::BadRequest(format!(
                    "unable to parse requirement: invalid label selector: {part}"
                )));
            } else {
                LabelReq::Exists(part.to_string())
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = objects::labels(obj);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
        })
    }

    /// Match a `matchLabels` + `matchExpressions` selector object (PVC `spec.selector`).
    pub fn from_object(sel: &Value) -> Self {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(LabelReq::Eq(
                    k.clone(),
                    v.as_str().unwrap_or("").to_string(),
                ));
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                match e.get("operator").and_then(Value::as_str) {
                    Some("In") => reqs.push(LabelReq::In(key, values)),
                    Some("NotIn") => reqs.push(LabelReq::NotIn(key, values)),
                    Some("Exists") => reqs.push(LabelReq::Exists(key)),
                    Some("DoesNotExist") => reqs.push(LabelReq::NotExists(key)),
                    _ => {}
                }
            }
        }
        LabelSelector(reqs)
    }
}

#[derive(Debug, Clone, Default)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parse, accepting only the field labels the resource supports (else 400 like the real server).
    pub fn parse(s: &str, def: &ResourceDef) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (field, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::BadRequest(format!(
                    "invalid field selector: '{part}': must be key=value, key==value or key!=value"
                )));
            };
            let field = field.trim();
            let supported = field == "metadata.name"
                || (field == "metadata.namespace" && def.namespaced)
                || def.field_labels.contains(&field);
            if !supported {
                return Err(ApiError::BadRequest(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, eq, value)| {
            let actual = match objects::path(obj, field) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                // The real server compares absent fields as "" (or "false" for bools).
                Some(Value::Null) | None if field == "spec.unschedulable" => "false".into(),
                _ => String::new(),
            };
            (actual == *value) == *eq
        })
    }

    /// `metadata.name=X` with nothing else: a single-object list/watch.
    pub fn single_name(&self) -> Option<&str> {
        match self.0.as_slice() {
            [(f, true, v)] if f == "metadata.name" => Some(v),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_grammar() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "db"}}});
        for (sel, want) in [
            ("app=web", true),
            ("app==web,tier", true),
            ("app!=web", false),
            ("app in (web, api),!missing", true),
            ("tier notin (db)", false),
            ("missing", false),
            ("", true),
        ] {
            let s = LabelSelector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(s.matches(&obj), want, "{sel}");
        }
        assert!(LabelSelector::parse("app in web").is_err());
    }
}
