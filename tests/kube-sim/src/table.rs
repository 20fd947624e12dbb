//! Server-side printing: `meta.k8s.io/v1` Table responses with the columns
//! kube-apiserver's printers produce, so `kubectl get` looks real.

use serde_json::{json, Value};

use crate::objects;
use crate::resources::{self, ResourceId};
use crate::util;

/// (name, type, priority)
type Column = (&'static str, &'static str, u8);

fn columns(res: ResourceId) -> &'static [Column] {
    match res {
        resources::PVC => &[
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Volume", "string", 0),
            ("Capacity", "string", 0),
            ("Access Modes", "string", 0),
            ("StorageClass", "string", 0),
            ("VolumeAttributesClass", "string", 0),
            ("Age", "string", 0),
            ("VolumeMode", "string", 1),
        ],
        resources::PV => &[
            ("Name", "string", 0),
            ("Capacity", "string", 0),
            ("Access Modes", "string", 0),
            ("Reclaim Policy", "string", 0),
            ("Status", "string", 0),
            ("Claim", "string", 0),
            ("StorageClass", "string", 0),
            ("VolumeAttributesClass", "string", 0),
            ("Reason", "string", 0),
            ("Age", "string", 0),
            ("VolumeMode", "string", 1),
        ],
        resources::STORAGE_CLASS => &[
            ("Name", "string", 0),
            ("Provisioner", "string", 0),
            ("ReclaimPolicy", "string", 0),
            ("VolumeBindingMode", "string", 0),
            ("AllowVolumeExpansion", "string", 0),
            ("Age", "string", 0),
        ],
        resources::NODE => &[
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
        ],
        resources::NAMESPACE => &[
            ("Name", "string", 0),
            ("Status", "string", 0),
            ("Age", "string", 0),
        ],
        resources::CONFIG_MAP => &[
            ("Name", "string", 0),
            ("Data", "integer", 0),
            ("Age", "string", 0),
        ],
        resources::POD => &[
            ("Name", "string", 0),
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("Node", "string", 1),
        ],
        resources::EVENT | resources::EVENT_V1 => &[
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Message", "string", 0),
        ],
        resources::LEASE => &[
            ("Name", "string", 0),
            ("Holder", "string", 0),
            ("Age", "string", 0),
        ],
        // No printer on the real server: its default table.
        resources::CSI_STORAGE_CAPACITY => &[("Name", "string", 0), ("Created At", "date", 0)],
        _ => &[("Name", "string", 0), ("Age", "string", 0)],
    }
}

/// kubectl's `HumanDuration`.
pub fn human_duration(secs: i64) -> String {
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        let rem = s % 60;
        if rem == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{rem}s")
        }
    } else if m < 180 {
        format!("{m}m")
    } else if h < 8 {
        let rem = m % 60;
        if rem == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{rem}m")
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 24 * 8 {
        let rem = h % 24;
        if rem == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{rem}h")
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

fn age(obj: &Value, field: &str) -> String {
    objects::path_str(obj, field)
        .and_then(util::parse_time)
        .map(|t| human_duration(util::now_seconds() - t))
        .unwrap_or_else(|| "<unknown>".into())
}

fn access_modes(v: Option<&Value>) -> String {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(|m| match m {
                    "ReadWriteOnce" => "RWO",
                    "ReadOnlyMany" => "ROX",
                    "ReadWriteMany" => "RWX",
                    "ReadWriteOncePod" => "RWOP",
                    other => other,
                })
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

fn s(obj: &Value, path: &str) -> String {
    objects::path_str(obj, path).unwrap_or("").to_string()
}

fn or_unset(v: String) -> Value {
    json!(if v.is_empty() {
        "<unset>".to_string()
    } else {
        v
    })
}

fn cells(res: ResourceId, obj: &Value, default_class: Option<&str>) -> Vec<Value> {
    let name = objects::name(obj).to_string();
    let created = age(obj, "metadata.creationTimestamp");
    match res {
        resources::PVC => {
            let bound = objects::path_str(obj, "status.phase") == Some("Bound");
            vec![
                json!(name),
                json!(s(obj, "status.phase")),
                json!(s(obj, "spec.volumeName")),
                json!(if bound {
                    s(obj, "status.capacity.storage")
                } else {
                    String::new()
                }),
                json!(if bound {
                    access_modes(objects::path(obj, "status.accessModes"))
                } else {
                    String::new()
                }),
                json!(s(obj, "spec.storageClassName")),
                or_unset(s(obj, "spec.volumeAttributesClassName")),
                json!(created),
                json!(s(obj, "spec.volumeMode")),
            ]
        }
        resources::PV => {
            let claim = match objects::path(obj, "spec.claimRef") {
                Some(c) => format!(
                    "{}/{}",
                    c.get("namespace").and_then(Value::as_str).unwrap_or(""),
                    c.get("name").and_then(Value::as_str).unwrap_or("")
                ),
                None => String::new(),
            };
            vec![
                json!(name),
                json!(s(obj, "spec.capacity.storage")),
                json!(access_modes(objects::path(obj, "spec.accessModes"))),
                json!(s(obj, "spec.persistentVolumeReclaimPolicy")),
                json!(s(obj, "status.phase")),
                json!(claim),
                json!(s(obj, "spec.storageClassName")),
                or_unset(s(obj, "spec.volumeAttributesClassName")),
                json!(s(obj, "status.reason")),
                json!(created),
                json!(s(obj, "spec.volumeMode")),
            ]
        }
        resources::STORAGE_CLASS => {
            let shown = if default_class == Some(name.as_str()) {
                format!("{name} (default)")
            } else {
                name
            };
            let expand = obj
                .get("allowVolumeExpansion")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            vec![
                json!(shown),
                json!(s(obj, "provisioner")),
                json!(s(obj, "reclaimPolicy")),
                json!(s(obj, "volumeBindingMode")),
                json!(expand.to_string()),
                json!(created),
            ]
        }
        resources::NODE => {
            let ready = objects::path(obj, "status.conditions")
                .and_then(Value::as_array)
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
                })
                .and_then(|c| c.get("status").and_then(Value::as_str))
                .map(|st| if st == "True" { "Ready" } else { "NotReady" })
                .unwrap_or("Unknown");
            let roles: Vec<&str> = objects::labels(obj)
                .map(|l| {
                    l.keys()
                        .filter_map(|k| k.strip_prefix("node-role.kubernetes.io/"))
                        .collect()
                })
                .unwrap_or_default();
            vec![
                json!(name),
                json!(ready),
                json!(if roles.is_empty() {
                    "<none>".to_string()
                } else {
                    roles.join(",")
                }),
                json!(created),
                json!(s(obj, "status.nodeInfo.kubeletVersion")),
            ]
        }
        resources::NAMESPACE => vec![json!(name), json!(s(obj, "status.phase")), json!(created)],
        resources::CONFIG_MAP => {
            let n = obj
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len())
                + obj
                    .get("binaryData")
                    .and_then(Value::as_object)
                    .map_or(0, |m| m.len());
            vec![json!(name), json!(n), json!(created)]
        }
        resources::POD => {
            let total = objects::path(obj, "spec.containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let statuses = objects::path(obj, "status.containerStatuses").and_then(Value::as_array);
            let ready = statuses.map_or(0, |a| {
                a.iter()
                    .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
                    .count()
            });
            let restarts: i64 = statuses.map_or(0, |a| {
                a.iter()
                    .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                    .sum()
            });
            let status = if objects::is_deleting(obj) {
                "Terminating".to_string()
            } else {
                s(obj, "status.phase")
            };
            let node = s(obj, "spec.nodeName");
            vec![
                json!(name),
                json!(format!("{ready}/{total}")),
                json!(status),
                json!(restarts.to_string()),
                json!(created),
                json!(if node.is_empty() {
                    "<none>".to_string()
                } else {
                    node
                }),
            ]
        }
        resources::EVENT | resources::EVENT_V1 => {
            let (regarding, last) = if res == resources::EVENT {
                let last = ["lastTimestamp", "eventTime", "metadata.creationTimestamp"]
                    .into_iter()
                    .find(|p| objects::path_str(obj, p).is_some())
                    .unwrap_or("metadata.creationTimestamp");
                ("involvedObject", last)
            } else {
                ("regarding", "metadata.creationTimestamp")
            };
            let kind = s(obj, &format!("{regarding}.kind")).to_lowercase();
            let oname = s(obj, &format!("{regarding}.name"));
            let message = if res == resources::EVENT {
                s(obj, "message")
            } else {
                s(obj, "note")
            };
            vec![
                json!(age(obj, last)),
                json!(s(obj, "type")),
                json!(s(obj, "reason")),
                json!(format!("{kind}/{oname}")),
                json!(message),
            ]
        }
        resources::LEASE => vec![
            json!(name),
            json!(s(obj, "spec.holderIdentity")),
            json!(created),
        ],
        resources::CSI_STORAGE_CAPACITY => {
            vec![json!(name), json!(s(obj, "metadata.creationTimestamp"))]
        }
        _ => vec![json!(name), json!(created)],
    }
}

fn column_definitions(res: ResourceId) -> Vec<Value> {
    columns(res)
        .iter()
        .map(|(name, ty, priority)| {
            let mut c = json!({
                "name": name,
                "type": ty,
                "format": if *name == "Name" { "name" } else { "" },
                "description": format!("{name} of the object"),
                "priority": priority,
            });
            if *name == "Name" {
                c["description"] = json!("Name must be unique within a namespace.");
            }
            c
        })
        .collect()
}

fn row(res: ResourceId, obj: &Value, default_class: Option<&str>) -> Value {
    let metadata = objects::meta(obj)
        .cloned()
        .map(Value::Object)
        .unwrap_or_else(|| json!({}));
    json!({
        "cells": cells(res, obj, default_class),
        "object": {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": metadata,
        }
    })
}

/// A Table of `items` (list responses and single-row watch events).
pub fn table(res: ResourceId, items: &[&Value], meta: Value, default_class: Option<&str>) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": column_definitions(res),
        "rows": items.iter().map(|o| row(res, o, default_class)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_durations_match_kubectl() {
        assert_eq!(super::human_duration(5), "5s");
        assert_eq!(super::human_duration(150), "2m30s");
        assert_eq!(super::human_duration(3600 * 5 + 60), "5h1m");
        assert_eq!(super::human_duration(86400 * 3), "3d");
    }
}
