//! Resources served in more than one API version share one storage, as on a
//! real server: events.k8s.io/v1 Events are stored as core/v1 Events and
//! converted on the way in and out, so an event written by kube-rs's
//! `Recorder` shows up in `kubectl describe`.

use serde_json::{Map, Value};

use crate::resources::{ResourceId, EVENT, EVENT_V1};

/// Where objects of API resource `res` are stored.
pub fn storage(res: ResourceId) -> ResourceId {
    if res == EVENT_V1 {
        EVENT
    } else {
        res
    }
}

/// (events.k8s.io/v1 field, core/v1 field)
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("related", "related"),
    ("note", "message"),
    ("reason", "reason"),
    ("type", "type"),
    ("action", "action"),
    ("reportingController", "reportingComponent"),
    ("reportingInstance", "reportingInstance"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("metadata", "metadata"),
];

fn rename(obj: &Value, api_version: &str, to_core: bool) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    out.insert("kind".into(), Value::String("Event".into()));
    for &(v1, core) in EVENT_FIELDS {
        let (from, to) = if to_core { (v1, core) } else { (core, v1) };
        if let Some(v) = obj.get(from).filter(|v| !v.is_null()) {
            out.insert(to.into(), v.clone());
        }
    }
    Value::Object(out)
}

/// API form → storage form.
pub fn to_storage(res: ResourceId, obj: Value) -> Value {
    if res != EVENT_V1 {
        return obj;
    }
    rename(&obj, "v1", true)
}

/// Storage form → API form.
pub fn from_storage(res: ResourceId, obj: &Value) -> Value {
    if res != EVENT_V1 {
        return obj.clone();
    }
    rename(obj, "events.k8s.io/v1", false)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn event_round_trip() {
        let v1 = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default"},
            "regarding": {"kind": "PersistentVolumeClaim", "name": "c"},
            "note": "hello", "reason": "Provisioning", "type": "Normal",
            "reportingController": "wasmprov.io/host", "reportingInstance": "host-1",
            "action": "Provision", "eventTime": "2026-01-01T00:00:00.000000Z"
        });
        let core = super::to_storage(super::EVENT_V1, v1.clone());
        assert_eq!(core["involvedObject"]["name"], "c");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["reportingComponent"], "wasmprov.io/host");
        assert_eq!(super::from_storage(super::EVENT_V1, &core), v1);
    }
}
