//! Which node a host serves, and what that means for claims and volumes.
//!
//! A host in node mode (`--node-name`, one per node as a DaemonSet) serves
//! only the claims whose selected node is its own, pins every volume it
//! saves to its node, and deletes, grows or finalizes only volumes pinned
//! to its node: what another node's host does costs it no API request. A
//! central host serves every node, so a plugin making node-local storage
//! (a directory on the host's own node) is refused there as soon as the
//! cluster has more than one node: the storage would land on the wrong one.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume,
    VolumeNodeAffinity,
};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

/// The label the scheduler and kubelet know a node by in volume affinity.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// The field a node selector term can name a node by.
const NAME_FIELD: &str = "metadata.name";

/// The node a node-mode host runs on and serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnNode {
    /// The Node object's name (`spec.nodeName` of the host's pod).
    pub name: String,
    /// Its `kubernetes.io/hostname` label, which volume affinity uses; the
    /// name when the label is missing, as the kubelet sets it by default.
    pub hostname: String,
}

impl OwnNode {
    /// Looks the node up, so that volumes are pinned by its hostname label.
    pub async fn lookup(client: &Client, name: &str) -> anyhow::Result<Self> {
        let node = Api::<Node>::all(client.clone())
            .get_opt(name)
            .await
            .map_err(|e| anyhow::anyhow!("--node-name {name}: cannot read Node {name}: {e}"))?
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--node-name {name}: there is no Node named {name}; pass the pod's \
                     spec.nodeName (env NODE_NAME through the downward API)"
                )
            })?;
        Ok(Self::of(&node))
    }

    /// The identity of `node`.
    pub fn of(node: &Node) -> Self {
        let name = node.name_any();
        let hostname = node
            .labels()
            .get(HOSTNAME_LABEL)
            .cloned()
            .unwrap_or_else(|| name.clone());
        Self { name, hostname }
    }

    /// The affinity that lets a volume be used on this node only.
    fn pin(&self) -> VolumeNodeAffinity {
        VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: HOSTNAME_LABEL.to_owned(),
                        operator: "In".to_owned(),
                        values: Some(vec![self.hostname.clone()]),
                    }]),
                    match_fields: None,
                }],
            }),
        }
    }

    /// Whether every term of `affinity` requires this node, so no other
    /// node can use the volume (a node matches when any one term does).
    fn only_here(&self, affinity: &VolumeNodeAffinity) -> bool {
        let terms = affinity
            .required
            .as_ref()
            .map(|r| r.node_selector_terms.as_slice())
            .unwrap_or_default();
        let requires = |rules: Option<&Vec<NodeSelectorRequirement>>, key: &str, value: &str| {
            rules.into_iter().flatten().any(|r| {
                r.key == key
                    && r.operator == "In"
                    && r.values
                        .as_ref()
                        .is_some_and(|v| !v.is_empty() && v.iter().all(|v| v == value))
            })
        };
        !terms.is_empty()
            && terms.iter().all(|t| {
                requires(t.match_expressions.as_ref(), HOSTNAME_LABEL, &self.hostname)
                    || requires(t.match_fields.as_ref(), NAME_FIELD, &self.name)
            })
    }
}

/// Whether a claim handed to us, with this selected node, is this host's
/// to act on: every claim for a central host (`own` is `None`), only those
/// whose selected node is its own for a node host. Decided from the claim
/// alone, so other nodes' claims cost no request.
pub fn claim_is_here(selected_node: Option<&str>, own: Option<&OwnNode>) -> bool {
    own.is_none_or(|own| selected_node == Some(own.name.as_str()))
}

/// Whether a volume is this host's to delete, grow or finalize: every
/// volume for a central host, only those pinned to its node for a node
/// host.
pub fn volume_is_here(pv: &PersistentVolume, own: Option<&OwnNode>) -> bool {
    own.is_none_or(|own| {
        pv.spec
            .as_ref()
            .and_then(|s| s.node_affinity.as_ref())
            .is_some_and(|a| own.only_here(a))
    })
}

/// The hostname a volume is pinned to (its affinity's first term), if any.
pub fn pinned_hostname(pv: &PersistentVolume) -> Option<&str> {
    let term = pv
        .spec
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms
        .first()?;
    term.match_expressions
        .iter()
        .flatten()
        .find(|r| r.key == HOSTNAME_LABEL && r.operator == "In")
        .and_then(|r| r.values.as_ref()?.first())
        .map(String::as_str)
}

/// Whether a node with this `kubernetes.io/hostname` exists: by name (the
/// usual case, one request), else by label.
pub async fn hostname_exists(client: &Client, hostname: &str) -> Result<bool, kube::Error> {
    let nodes = Api::<Node>::all(client.clone());
    if nodes.get_opt(hostname).await?.is_some() {
        return Ok(true);
    }
    let by_label = ListParams::default()
        .labels(&format!("{HOSTNAME_LABEL}={hostname}"))
        .limit(1);
    Ok(!nodes.list(&by_label).await?.items.is_empty())
}

/// Pins a volume a node host is about to save to its node: the pin is
/// added when the plugin returned no affinity; an affinity that would let
/// another node use the volume is refused (its storage is on this node).
pub fn pin(pv: &mut PersistentVolume, own: &OwnNode, plugin: &str) -> Result<(), String> {
    let spec = pv.spec.get_or_insert_with(Default::default);
    let none = spec
        .node_affinity
        .as_ref()
        .and_then(|a| a.required.as_ref())
        .is_none_or(|r| r.node_selector_terms.is_empty());
    if none {
        spec.node_affinity = Some(own.pin());
        return Ok(());
    }
    if spec
        .node_affinity
        .as_ref()
        .is_some_and(|a| own.only_here(a))
    {
        return Ok(());
    }
    Err(format!(
        "plugin {plugin} returned volume {} with a node affinity that lets nodes other than {} \
         use it, but a node host makes storage on its own node: return no nodeAffinity (the \
         host pins the volume to its node) or require {HOSTNAME_LABEL} In [{}] in every term",
        pv.name_any(),
        own.name,
        own.hostname,
    ))
}

/// Whether a volume's storage lives on one node's filesystem.
pub fn is_node_local(pv: &PersistentVolume) -> bool {
    pv.spec
        .as_ref()
        .is_some_and(|s| s.host_path.is_some() || s.local.is_some())
}

/// How long a count of the cluster's nodes is trusted.
const NODE_COUNT_TTL: Duration = Duration::from_secs(30);

/// Whether the cluster has more than one node, for the central guard: read
/// (a list of at most two nodes) at most every [`NODE_COUNT_TTL`], and only
/// by a central host asked to make node-local storage.
#[derive(Default)]
pub struct NodeCount {
    last: tokio::sync::Mutex<Option<(Instant, bool)>>,
}

impl NodeCount {
    pub async fn more_than_one(&self, client: &Client) -> Result<bool, kube::Error> {
        let mut last = self.last.lock().await;
        if let Some((at, many)) = *last {
            if at.elapsed() < NODE_COUNT_TTL {
                return Ok(many);
            }
        }
        let page = Api::<Node>::all(client.clone())
            .list(&ListParams::default().limit(2))
            .await?;
        let many = page.items.len() > 1;
        *last = Some((Instant::now(), many));
        Ok(many)
    }
}

#[cfg(test)]
mod tests {
    use super::super::decide;
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PersistentVolumeSpec};

    fn own() -> OwnNode {
        OwnNode {
            name: "n1".into(),
            hostname: "host-1".into(),
        }
    }

    fn term(key: &str, values: &[&str]) -> serde_json::Value {
        serde_json::json!({"matchExpressions": [{"key": key, "operator": "In", "values": values}]})
    }

    fn pv(terms: Option<Vec<serde_json::Value>>) -> PersistentVolume {
        let mut spec = serde_json::json!({"hostPath": {"path": "/v/pvc-1"}});
        if let Some(terms) = terms {
            spec["nodeAffinity"] = serde_json::json!({"required": {"nodeSelectorTerms": terms}});
        }
        serde_json::from_value(serde_json::json!({"metadata": {"name": "pvc-1"}, "spec": spec}))
            .unwrap()
    }

    fn claim(selected: Option<&str>) -> PersistentVolumeClaim {
        let mut claim = PersistentVolumeClaim::default();
        if let Some(node) = selected {
            claim.metadata.annotations = Some(
                [(decide::keys::SELECTED_NODE.to_owned(), node.to_owned())]
                    .into_iter()
                    .collect(),
            );
        }
        claim
    }

    #[test]
    fn a_node_host_serves_only_claims_selected_for_its_node() {
        let own = own();
        let here = |selected, own| claim_is_here(decide::selected_node(&claim(selected)), own);
        assert!(here(Some("n1"), Some(&own)));
        for other in [Some("n2"), Some("host-1"), Some(""), None] {
            assert!(!here(other, Some(&own)), "{other:?}");
        }
        for any in [Some("n2"), None] {
            assert!(here(any, None), "central: {any:?}");
        }
    }

    #[test]
    fn a_node_host_acts_only_on_volumes_no_other_node_can_use() {
        let own = own();
        let here = |pv: &PersistentVolume| volume_is_here(pv, Some(&own));
        assert!(here(&pv(Some(vec![term(HOSTNAME_LABEL, &["host-1"])]))));
        let by_name = serde_json::json!({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]});
        assert!(here(&pv(Some(vec![by_name]))));
        let narrower = serde_json::json!({"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["z1"]},
            {"key": HOSTNAME_LABEL, "operator": "In", "values": ["host-1"]}]});
        assert!(here(&pv(Some(vec![narrower]))));
        for (why, terms) in [
            ("no affinity", None),
            ("no terms", Some(vec![])),
            (
                "another node",
                Some(vec![term(HOSTNAME_LABEL, &["host-2"])]),
            ),
            (
                "this node or another",
                Some(vec![term(HOSTNAME_LABEL, &["host-1", "host-2"])]),
            ),
            (
                "a second term for another node",
                Some(vec![
                    term(HOSTNAME_LABEL, &["host-1"]),
                    term(HOSTNAME_LABEL, &["host-2"]),
                ]),
            ),
            ("a whole zone", Some(vec![term("zone", &["z1"])])),
            (
                "the name as a label",
                Some(vec![term(HOSTNAME_LABEL, &["n1"])]),
            ),
        ] {
            assert!(!here(&pv(terms)), "{why}");
        }
        assert!(volume_is_here(&pv(None), None), "central: every volume");
    }

    #[test]
    fn a_node_hosts_volume_is_pinned_to_its_node_or_refused() {
        let own = own();
        let mut unpinned = pv(None);
        pin(&mut unpinned, &own, "hostpath").unwrap();
        assert!(volume_is_here(&unpinned, Some(&own)));
        assert_eq!(
            serde_json::to_value(&unpinned.spec.as_ref().unwrap().node_affinity).unwrap(),
            serde_json::json!({"required": {"nodeSelectorTerms": [term(HOSTNAME_LABEL, &["host-1"])]}})
        );
        let mut empty = pv(Some(vec![]));
        pin(&mut empty, &own, "hostpath").unwrap();
        assert!(volume_is_here(&empty, Some(&own)));

        let mut pinned = pv(Some(vec![term(HOSTNAME_LABEL, &["host-1"])]));
        let before = pinned.clone();
        pin(&mut pinned, &own, "hostpath").unwrap();
        assert_eq!(pinned, before, "an exact pin is kept as it is");

        let mut broad = pv(Some(vec![term("zone", &["z1"])]));
        let message = pin(&mut broad, &own, "hostpath").unwrap_err();
        assert!(
            message.contains("plugin hostpath returned volume pvc-1")
                && message.contains("kubernetes.io/hostname In [host-1]"),
            "{message}"
        );
    }

    #[test]
    fn only_host_path_and_local_volumes_are_node_local() {
        assert!(is_node_local(&pv(None)));
        let local = PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                local: Some(Default::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(is_node_local(&local));
        let nfs: PersistentVolume = serde_json::from_value(
            serde_json::json!({"spec": {"nfs": {"server": "10.0.0.5", "path": "/x"}}}),
        )
        .unwrap();
        assert!(!is_node_local(&nfs));
    }
}
