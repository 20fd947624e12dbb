//! What the decision tests share.

use super::Names;

pub fn names() -> Names {
    Names {
        primary: "wasmprov.io/host".into(),
        additional: vec!["example.com/legacy".into()],
    }
}

/// JSON merge patch: objects merge, `null` removes a key.
pub fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
    match (base, patch) {
        (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(&k);
                } else {
                    merge(b.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
        }
        (b, p) => *b = p,
    }
}
