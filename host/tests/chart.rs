//! The Helm chart (deploy/chart): it lints strictly, renders with its
//! defaults what `kubectl kustomize deploy/` does (after the differences a
//! chart is meant to have: its own labels, no Namespace object, the test
//! hook instead of the demo claim), refuses a typo in its values, and its
//! values change what they say. Helm is built from the Go module proxy with
//! the test cluster (tests/cluster/build.sh).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::workspace_root;

/// The labels the chart adds to what deploy/ has.
const CHART_LABELS: [&str; 3] = [
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
];

fn helm() -> Command {
    let bin = test_cluster::binaries().expect("build helm (tests/cluster/build.sh)");
    let mut command = Command::new(bin.join("helm"));
    // No user configuration or cache of this machine's.
    let home = std::env::temp_dir().join("wasmprov-helm-home");
    command
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"));
    command
}

fn chart_dir() -> PathBuf {
    workspace_root().join("deploy/chart")
}

/// Runs helm; its stdout, or its stderr as the error.
fn run(mut command: Command) -> Result<String, String> {
    let out = command.output().expect("run helm");
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// `helm template` of the chart in namespace `wasmprov` with `args`.
fn template(args: &[&str]) -> Result<Vec<Value>, String> {
    let mut command = helm();
    command
        .args(["template", "wasmprov"])
        .arg(chart_dir())
        .args(["--namespace", "wasmprov"])
        .args(args);
    run(command).map(|text| documents(&text))
}

fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|d| serde_yaml::from_value::<Value>(serde::Deserialize::deserialize(d).unwrap()))
        .filter_map(|v| v.ok())
        .filter(|v| !v.is_null())
        .collect()
}

fn key(o: &Value) -> (String, String) {
    (
        o["kind"].as_str().unwrap_or_default().to_owned(),
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// Parses the sandbox policy inside its ConfigMap, so that comments and
/// layout do not count.
fn normalise(mut o: Value) -> Value {
    if let Some(meta) = o["metadata"].as_object_mut() {
        meta.remove("namespace");
    }
    for labels in ["/metadata/labels", "/spec/template/metadata/labels"] {
        if let Some(Value::Object(labels)) = o.pointer_mut(labels) {
            for l in CHART_LABELS {
                labels.remove(l);
            }
        }
    }
    if let Some(Value::String(policy)) = o.pointer("/data/policy.yaml") {
        let parsed: Value = serde_yaml::from_str(policy).unwrap();
        o["data"]["policy.yaml"] = parsed;
    }
    o
}

fn kustomize() -> Vec<Value> {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(workspace_root().join("deploy"))
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    documents(&String::from_utf8(out.stdout).unwrap())
}

fn by_key(objects: Vec<Value>) -> BTreeMap<(String, String), Value> {
    objects
        .into_iter()
        .map(|o| (key(&o), normalise(o)))
        .collect()
}

/// Where `got` (the chart's) and `want` (deploy/'s) first differ, as a
/// JSON pointer and both values, short.
fn first_difference(at: &str, got: &Value, want: &Value) -> Option<String> {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            let keys: std::collections::BTreeSet<&String> = g.keys().chain(w.keys()).collect();
            keys.into_iter().find_map(|k| {
                let path = format!("{at}/{k}");
                first_difference(
                    &path,
                    g.get(k).unwrap_or(&Value::Null),
                    w.get(k).unwrap_or(&Value::Null),
                )
            })
        }
        (Value::Array(g), Value::Array(w)) if g.len() == w.len() => (g.iter().zip(w))
            .enumerate()
            .find_map(|(i, (g, w))| first_difference(&format!("{at}/{i}"), g, w)),
        _ if got == want => None,
        _ => {
            let short = |v: &Value| {
                let text = v.to_string();
                if text.len() > 300 {
                    format!("{}…", &text[..300])
                } else {
                    text
                }
            };
            Some(format!(
                "at {at}: the chart has {}, deploy/ has {}",
                short(got),
                short(want)
            ))
        }
    }
}

fn is_hook(o: &Value) -> bool {
    o.pointer("/metadata/annotations/helm.sh~1hook").is_some()
}

#[test]
fn the_chart_lints_strictly() {
    let mut command = helm();
    command.args(["lint", "--strict"]).arg(chart_dir());
    let out = run(command).unwrap_or_else(|e| panic!("helm lint --strict: {e}"));
    assert!(out.contains("0 chart(s) failed"), "{out}");
}

#[test]
fn its_defaults_render_what_kustomize_does() {
    let rendered = template(&[]).unwrap();
    let (hooks, objects): (Vec<Value>, Vec<Value>) = rendered.into_iter().partition(is_hook);
    let chart = by_key(objects);
    let mut deploy = by_key(kustomize());
    // Helm installs into a namespace it is given (--create-namespace); the
    // demo claim and pod are `helm test`'s hook instead.
    deploy.remove(&("Namespace".into(), "wasmprov".into()));
    deploy.remove(&("PersistentVolumeClaim".into(), "demo".into()));
    deploy.remove(&("Pod".into(), "demo".into()));
    let only = |a: &BTreeMap<_, _>, b: &BTreeMap<_, _>| -> Vec<(String, String)> {
        a.keys().filter(|k| !b.contains_key(*k)).cloned().collect()
    };
    assert_eq!(only(&chart, &deploy), Vec::new(), "only in the chart");
    assert_eq!(only(&deploy, &chart), Vec::new(), "only in deploy/");
    for (k, want) in &deploy {
        if let Some(difference) = first_difference("", &chart[k], want) {
            panic!("{k:?}: {difference}");
        }
    }
    // Every object carries the chart's labels.
    for o in template(&[]).unwrap() {
        for l in CHART_LABELS {
            assert!(
                o["metadata"]["labels"].get(l).is_some(),
                "{:?} lacks label {l}",
                key(&o)
            );
        }
    }
    let hooks: Vec<(String, String)> = hooks.iter().map(key).collect();
    assert_eq!(
        hooks,
        [
            (
                "PersistentVolumeClaim".to_owned(),
                "wasmprov-test".to_owned()
            ),
            ("Pod".to_owned(), "wasmprov-test".to_owned())
        ]
    );
}

#[test]
fn a_typo_in_the_values_is_an_error_naming_it() {
    for (args, names) in [
        (
            vec!["--set", "node.tolerationz[0].operator=Exists"],
            "tolerationz",
        ),
        (vec!["--set", "storageClasses[0].side=nodes"], "side"),
        (
            vec!["--set", "node.provisionerName=wasmprov.io/node"],
            "provisionerName",
        ),
        (vec!["--set", "central.replicas=two"], "replicas"),
    ] {
        let error = template(&args).expect_err(&format!("{args:?} was accepted"));
        assert!(
            error.contains("values don't meet the specifications of the schema")
                && error.contains(names),
            "{args:?}: {error}"
        );
    }
}

#[test]
fn values_change_what_they_say() {
    let values = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        values.path(),
        r#"
image: {repository: registry.example/wasmprov, tag: "9.9.9", pullPolicy: Always}
central: {enabled: false}
node:
  provisionerName: local.example.com
  extraVolumes: [{name: signing, configMap: {name: release-keys}}]
  extraVolumeMounts: [{name: signing, mountPath: /etc/wasmprov/signing, readOnly: true}]
  nodeSelector: {storage: "yes"}
  tolerations: []
  directories: [{name: fast, path: /mnt/fast}]
  capacity: {publish: false}
plugins: {bundledHostpath: false, node: [my-plugin]}
storageClasses:
  - {name: fast, side: node, parameters: {plugin: mine, hostRoot: /mnt/fast}, reclaimPolicy: Retain}
policy:
  plugins:
    mine:
      runsOn: node
      preopens: [{host: /mnt/fast, guest: /v, mode: read-write}]
      output: {sources: [hostPath], paths: [/mnt/fast]}
"#,
    )
    .unwrap();
    let objects = template(&["--values", values.path().to_str().unwrap()]).unwrap();
    let find = |kind: &str, name: &str| {
        objects
            .iter()
            .find(|o| key(o) == (kind.to_owned(), name.to_owned()))
            .cloned()
    };
    assert!(find("Deployment", "wasmprov").is_none());
    assert!(find("ClusterRole", "wasmprov").is_none());
    assert!(find("ConfigMap", "wasmprov-plugin-hostpath").is_none());
    assert!(
        find("CSIDriver", "local.example.com").is_none(),
        "capacity off: no CSIDriver"
    );
    let ds = find("DaemonSet", "wasmprov-node").unwrap();
    let pod = &ds["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "registry.example/wasmprov:9.9.9");
    assert_eq!(container["imagePullPolicy"], "Always");
    let args: Vec<&str> = (container["args"].as_array().unwrap().iter())
        .map(|a| a.as_str().unwrap())
        .collect();
    for want in [
        "--provisioner-name=local.example.com",
        "--publish-capacity=false",
    ] {
        assert!(args.contains(&want), "{args:?}");
    }
    assert_eq!(pod["nodeSelector"]["storage"], "yes");
    let signing = (pod["volumes"].as_array().unwrap().iter())
        .find(|v| v["name"] == "signing")
        .expect("the extra volume");
    assert_eq!(signing["configMap"]["name"], "release-keys");
    let mounts = container["volumeMounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["mountPath"] == "/etc/wasmprov/signing"),
        "{mounts:?}"
    );
    assert!(pod.get("tolerations").is_none());
    assert_eq!(
        pod["volumes"][0]["projected"]["sources"][0]["configMap"]["name"],
        "my-plugin"
    );
    assert_eq!(
        pod["initContainers"][0]["command"],
        serde_json::json!(["chown", "65532:65532", "/mnt/fast"])
    );
    let class = find("StorageClass", "fast").unwrap();
    assert_eq!(class["provisioner"], "local.example.com");
    assert_eq!(class["reclaimPolicy"], "Retain");
    let policy = find("ConfigMap", "wasmprov-policy").unwrap();
    let policy: Value =
        serde_yaml::from_str(policy["data"]["policy.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(policy["plugins"]["mine"]["runsOn"], "node");
    // The host itself accepts the policy the chart renders.
    let parsed = wasmprov::policy::PolicySet::parse(
        &serde_yaml::to_string(&policy).unwrap(),
        Path::new("policy.yaml"),
    );
    assert!(parsed.is_ok(), "{parsed:?}");
}

#[test]
fn a_side_takes_its_plugins_from_an_image_volume_instead_of_configmaps() {
    let objects = template(&[
        "--set",
        "plugins.node=null",
        "--set",
        "plugins.nodeImage.reference=registry.example/plugins:1",
    ])
    .unwrap();
    let ds = (objects.iter())
        .find(|o| key(o) == ("DaemonSet".to_owned(), "wasmprov-node".to_owned()))
        .unwrap();
    let volumes = ds["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap();
    let plugins = volumes.iter().find(|v| v["name"] == "plugins").unwrap();
    assert_eq!(
        plugins["image"],
        serde_json::json!({"reference": "registry.example/plugins:1", "pullPolicy": "IfNotPresent"})
    );
    let deployment = (objects.iter())
        .find(|o| key(o) == ("Deployment".to_owned(), "wasmprov".to_owned()))
        .unwrap();
    let central = &deployment["spec"]["template"]["spec"]["volumes"];
    assert!(
        central[0].get("projected").is_some(),
        "the other side keeps its ConfigMaps: {central}"
    );

    // Both at once would leave the ConfigMaps unmounted without a word.
    let error = template(&[
        "--set",
        "plugins.nodeImage.reference=registry.example/plugins:1",
    ])
    .expect_err("an image beside the node ConfigMaps was accepted");
    assert!(
        error.contains(
            "plugins.nodeImage replaces the node hosts' plugin ConfigMaps: set plugins.node to []"
        ),
        "{error}"
    );
}
