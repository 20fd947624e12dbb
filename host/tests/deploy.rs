//! `deploy/`: every manifest parses into its Kubernetes type with no unknown
//! (misspelled) field, the kustomization lists them all, they apply to the
//! simulated API server, each host's (the central Deployment's, the node
//! DaemonSet's) flags, mounts and sandbox policy fit together, and
//! `rbac.yaml` and `rbac-node.yaml` grant exactly what each side calls: the
//! test runs `wasmprov run` configured by the Deployment itself (two
//! replicas, leader election, a backend added as deploy/README.md says) and
//! by the DaemonSet (one host per node) against the API server and compares
//! each side's requests with its rules. The same again with the API plugin
//! source enabled (deploy/api-source/, a kustomize Component): it builds,
//! parses, applies, and its Role is exactly what the hosts configured by it
//! call.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{CommandFactory, Parser};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, PersistentVolume, PersistentVolumeClaim, PodSpec,
    PodTemplateSpec, ServiceAccount,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use kube::api::{DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::core::params::ValidationDirective;
use kube::discovery::Scope;
use kube::{Api, Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use support::{eventually, workspace_root, Server, TestApi};
use wasmprov::cli::Cli;
use wasmprov::delivery::configmaps;
use wasmprov::delivery::encoding::Encoding;
use wasmprov::delivery::package;
use wasmprov::policy::{DirMode, PolicySet, RunsOn};

/// The hostpath plugin's ConfigMap: made by `wasmprov plugin pack` and
/// committed, so installing needs no Rust toolchain; a test keeps it the
/// current plugin.
const PLUGIN_MANIFEST: &str = "plugin-hostpath.yaml";
/// How to make it again (deploy/README.md says the same).
const REGENERATE: &str = "bash plugins/build.sh --rust-only && cargo run -q -p wasmprov -- plugin pack target/plugins/hostpath.wasm --name hostpath > deploy/plugin-hostpath.yaml";
/// The nodes of the API server the tests start: one node host each.
const NODES: [&str; 2] = ["worker-1", "worker-2"];
/// The central hosts' provisioner name, and the node hosts'.
const CENTRAL_PROVISIONER: &str = "wasmprov.io/host";
const NODE_PROVISIONER: &str = "node.wasmprov.io";

/// Rules that the scenario below cannot exercise deterministically, each
/// with why it is still needed. Keep this short: every entry is a permission
/// no test proves.
const UNEXERCISED: &[(&str, &str, &str, &str)] = &[
    (
        "",
        "persistentvolumeclaims",
        "get",
        "lifecycle/in_progress.rs reads a claim again when a plugin answered \
         in-background and the claim went away meanwhile; the hostpath plugin the \
         hosts serve never answers in-background (host/tests/lifecycle.rs covers \
         the behaviour with a test guest)",
    ),
    (
        "",
        "persistentvolumes",
        "get",
        "lifecycle/claims.rs reads a volume whose create answered AlreadyExists, \
         to tell an earlier attempt's volume (success) from a clash; the volume \
         watch's cache makes that a race (a lost answer, a restart), not a step \
         of the scenario",
    ),
];

// ---------------------------------------------------------------------------
// The manifests

/// One YAML document of deploy/.
#[derive(Debug, Clone)]
struct Object {
    file: String,
    value: Value,
}

impl Object {
    fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }

    fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }

    fn typed<K: DeserializeOwned>(&self) -> K {
        serde_json::from_value(self.value.clone())
            .unwrap_or_else(|e| panic!("{} {}: {e}", self.file, self.name()))
    }
}

/// Every file the host's build reads from outside its own crate (embedded
/// files, the WIT package, path dependencies, workspace members) is in one of
/// the directories the Containerfile's build stage copies. A missing one only
/// shows when someone builds the image, which nothing here can do.
#[test]
fn the_containerfile_copies_everything_the_host_build_reads() {
    let root = workspace_root();
    let containerfile = std::fs::read_to_string(root.join("deploy/Containerfile")).unwrap();
    let copied: Vec<PathBuf> = containerfile
        .lines()
        .filter_map(|l| l.strip_prefix("COPY "))
        .filter(|l| !l.starts_with("--from"))
        .flat_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words[..words.len() - 1]
                .iter()
                .map(|w| root.join(w).canonicalize().unwrap_or_else(|_| root.join(w)))
                .collect::<Vec<_>>()
        })
        .collect();
    let copied_has = |p: &Path| copied.iter().any(|c| p.starts_with(c));

    // (file that names it, path as named, directory it is relative to)
    let mut read: Vec<(PathBuf, String, PathBuf)> = Vec::new();
    let quoted_after = |text: &str, marker: &str| -> Vec<String> {
        text.match_indices(marker)
            .filter_map(|(i, _)| {
                let rest = &text[i + marker.len()..];
                Some(rest[..rest.find('"')?].to_owned())
            })
            .collect()
    };
    for krate in ["host", "tests/kube-sim"] {
        let dir = root.join(krate);
        let manifest = dir.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        for p in quoted_after(&text, "path = \"") {
            read.push((manifest.clone(), p, dir.clone()));
        }
        let mut sources = vec![dir.join("src")];
        while let Some(d) = sources.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    sources.push(path);
                    continue;
                }
                let Ok(text) = std::fs::read_to_string(&path) else {
                    continue;
                };
                let here = path.parent().unwrap().to_owned();
                for marker in ["include_str!(\"", "include_bytes!(\""] {
                    for p in quoted_after(&text, marker) {
                        read.push((path.clone(), p, here.clone()));
                    }
                }
                // bindgen!'s WIT path is relative to the crate.
                if text.contains("bindgen!") {
                    for p in quoted_after(&text, "path: \"") {
                        read.push((path.clone(), p, dir.clone()));
                    }
                }
            }
        }
    }
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members = &workspace[workspace.find("members = [").unwrap()..];
    let members = &members[..members.find(']').unwrap()];
    for m in members.split('"').skip(1).step_by(2) {
        read.push((
            root.join("Cargo.toml"),
            format!("{m}/Cargo.toml"),
            root.clone(),
        ));
    }
    assert!(
        read.iter().any(|(_, p, _)| p.contains("deploy/examples")),
        "the scan finds dev's embedded samples: {read:?}"
    );

    let missing: Vec<String> = read
        .iter()
        .filter_map(|(file, p, base)| {
            let path = base.join(p).canonicalize().unwrap_or_else(|e| {
                panic!("{} names {p}, which does not exist: {e}", file.display())
            });
            (!copied_has(&path)).then(|| format!("{p} (named in {})", file.display()))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "deploy/Containerfile's build stage does not COPY what the host's build reads; add a \
         COPY for: {missing:?}"
    );
}

fn deploy_dir() -> PathBuf {
    workspace_root().join("deploy")
}

/// The committed manifests: deploy/*.yaml but the kustomization and the
/// generated plugin ConfigMap.
fn manifest_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(deploy_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    files.sort();
    files
}

fn documents(file: &str, text: &str) -> Vec<Object> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{file}: not YAML: {e}")))
        .filter(|v| !v.is_null())
        .map(|value| Object {
            file: file.to_owned(),
            value,
        })
        .collect()
}

/// Every object `kubectl apply -k deploy/` creates, the generated plugin
/// ConfigMap included.
fn all_objects() -> Vec<Object> {
    manifest_files()
        .iter()
        .flat_map(|f| documents(f, &std::fs::read_to_string(deploy_dir().join(f)).unwrap()))
        .collect()
}

fn one<'a>(objects: &'a [Object], kind: &str) -> &'a Object {
    let found: Vec<&Object> = objects.iter().filter(|o| o.kind() == kind).collect();
    assert_eq!(found.len(), 1, "expected one {kind} in deploy/");
    found[0]
}

/// A host of deploy/: the central Deployment or the node DaemonSet.
#[derive(Debug, Clone)]
struct Workload {
    kind: String,
    name: String,
    pod: PodSpec,
}

impl Workload {
    fn of(o: &Object) -> Workload {
        let template: PodTemplateSpec = serde_json::from_value(o.value["spec"]["template"].clone())
            .unwrap_or_else(|e| panic!("{} {}: {e}", o.kind(), o.name()));
        Workload {
            kind: o.kind().to_owned(),
            name: o.name().to_owned(),
            pod: template.spec.expect("a pod spec"),
        }
    }

    /// The host container, the only one.
    fn container(&self) -> Container {
        assert_eq!(self.pod.containers.len(), 1, "{} {}", self.kind, self.name);
        self.pod.containers[0].clone()
    }

    fn service_account(&self) -> String {
        self.pod
            .service_account_name
            .clone()
            .expect("a ServiceAccount")
    }

    /// Which plugins of the policy this host serves.
    fn side(&self) -> RunsOn {
        match self.kind.as_str() {
            "DaemonSet" => RunsOn::Node,
            _ => RunsOn::Central,
        }
    }

    fn provisioner(&self) -> &'static str {
        match self.side() {
            RunsOn::Node => NODE_PROVISIONER,
            RunsOn::Central => CENTRAL_PROVISIONER,
        }
    }

    /// The user its pods are: on the real server their ServiceAccount; the
    /// simulator authenticates nobody, so they send this as their bearer
    /// token and its request log tells their requests apart.
    fn user(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            namespace(),
            self.service_account()
        )
    }
}

/// The hosts of deploy/: its Deployment, then its DaemonSet.
fn workloads(objects: &[Object]) -> Vec<Workload> {
    ["Deployment", "DaemonSet"]
        .iter()
        .map(|kind| workload(objects, kind))
        .collect()
}

fn workload(objects: &[Object], kind: &str) -> Workload {
    Workload::of(one(objects, kind))
}

/// The namespace kustomize puts every namespaced object in.
fn namespace() -> String {
    let k: Value = serde_yaml::from_str(
        &std::fs::read_to_string(deploy_dir().join("kustomization.yaml")).unwrap(),
    )
    .unwrap();
    k["namespace"].as_str().unwrap().to_owned()
}

/// deploy/plugin-hostpath.yaml as the documented command makes it:
/// `wasmprov plugin pack target/plugins/hostpath.wasm --name hostpath`.
fn hostpath_plugin_manifest() -> String {
    static MANIFEST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MANIFEST
        .get_or_init(|| {
            let wasm = support::rust_plugin_path("hostpath");
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_wasmprov"))
                .args(["plugin", "pack"])
                .arg(&wasm)
                .args(["--name", "hostpath"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "wasmprov plugin pack failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        })
        .clone()
}

/// Parses `o` into `K` and back: any field of the manifest the type does not
/// have (a typo, a field in the wrong place) or reads differently is an error.
fn round_trip<K: Serialize + DeserializeOwned>(o: &Object) -> Vec<String> {
    let typed: K = match serde_json::from_value(o.value.clone()) {
        Ok(t) => t,
        Err(e) => return vec![format!("does not parse: {e}")],
    };
    let back = serde_json::to_value(&typed).unwrap();
    let mut problems = Vec::new();
    differences(&o.value, &back, "", &mut problems);
    problems
}

fn differences(manifest: &Value, typed: &Value, path: &str, out: &mut Vec<String>) {
    match (manifest, typed) {
        (Value::Object(m), Value::Object(t)) => {
            for (k, v) in m {
                let p = format!("{path}.{k}");
                match t.get(k) {
                    Some(tv) => differences(v, tv, &p, out),
                    None => out.push(format!("{p}: not a field of this kind (misspelled?)")),
                }
            }
        }
        (Value::Array(m), Value::Array(t)) if m.len() == t.len() => {
            for (i, (mv, tv)) in m.iter().zip(t).enumerate() {
                differences(mv, tv, &format!("{path}[{i}]"), out);
            }
        }
        _ if manifest != typed => out.push(format!("{path}: {manifest} reads as {typed}")),
        _ => {}
    }
}

/// What is wrong with `o` read strictly as its kind (nothing: empty).
fn strict(o: &Object) -> Vec<String> {
    match o.kind() {
        "Namespace" => round_trip::<Namespace>(o),
        "ServiceAccount" => round_trip::<ServiceAccount>(o),
        "ClusterRole" => round_trip::<ClusterRole>(o),
        "ClusterRoleBinding" => round_trip::<ClusterRoleBinding>(o),
        "Role" => round_trip::<Role>(o),
        "RoleBinding" => round_trip::<RoleBinding>(o),
        "Deployment" => round_trip::<Deployment>(o),
        "DaemonSet" => round_trip::<DaemonSet>(o),
        "Pod" => round_trip::<k8s_openapi::api::core::v1::Pod>(o),
        "ConfigMap" => round_trip::<ConfigMap>(o),
        "StorageClass" => round_trip::<StorageClass>(o),
        "CSIDriver" => round_trip::<k8s_openapi::api::storage::v1::CSIDriver>(o),
        "PersistentVolumeClaim" => round_trip::<PersistentVolumeClaim>(o),
        other => vec![format!("unexpected kind {other:?}")],
    }
}

#[test]
fn every_manifest_parses_into_its_kubernetes_type() {
    let objects = all_objects();
    let mut problems = Vec::new();
    for o in &objects {
        let found = strict(o);
        if o.name().is_empty() {
            problems.push(format!("{}: a {} without a name", o.file, o.kind()));
        }
        if o.value["metadata"].get("namespace").is_some() {
            problems.push(format!(
                "{} {}: sets metadata.namespace; kustomization.yaml sets it",
                o.file,
                o.name()
            ));
        }
        problems.extend(
            found
                .into_iter()
                .map(|p| format!("{} {} {}: {p}", o.file, o.kind(), o.name())),
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let kinds: BTreeSet<&str> = objects.iter().map(Object::kind).collect();
    assert_eq!(
        kinds.len(),
        13,
        "every kind of deploy/ is present: {kinds:?}"
    );
}

/// The line deploy/api-source/README.md tells users to add to
/// deploy/kustomization.yaml.
const ENABLE_API_SOURCE: &str = "components: [api-source]";

/// deploy/ as a user has it after the install steps (the generated plugin
/// ConfigMap included), copied into `<dir>/deploy`; with `api_source`, the
/// API source enabled as deploy/api-source/README.md says.
fn deploy_copy(api_source: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("deploy");
    std::fs::create_dir_all(base.join("api-source")).unwrap();
    for f in manifest_files()
        .iter()
        .chain(["kustomization.yaml".to_owned()].iter())
    {
        std::fs::copy(deploy_dir().join(f), base.join(f)).unwrap();
    }
    for e in std::fs::read_dir(deploy_dir().join("api-source")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), base.join("api-source").join(e.file_name())).unwrap();
    }
    if api_source {
        let path = base.join("kustomization.yaml");
        let mut k = std::fs::read_to_string(&path).unwrap();
        k.push_str(&format!("{ENABLE_API_SOURCE}\n"));
        std::fs::write(&path, k).unwrap();
    }
    dir
}

/// `kubectl kustomize DIR`: the objects, or kustomize's error.
fn kustomize(dir: &Path) -> Result<Vec<Object>, String> {
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("run kubectl (preinstalled on this kind of machine) for `kubectl kustomize`");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(documents(
        "kustomize",
        &String::from_utf8(out.stdout).unwrap(),
    ))
}

/// What `kubectl apply -k deploy/` applies, with or without the API source.
fn build(api_source: bool) -> Vec<Object> {
    let dir = deploy_copy(api_source);
    kustomize(&dir.path().join("deploy"))
        .unwrap_or_else(|e| panic!("kubectl kustomize deploy/ (api source: {api_source}): {e}"))
}

#[test]
fn the_kustomization_lists_every_manifest() {
    let k: Value = serde_yaml::from_str(
        &std::fs::read_to_string(deploy_dir().join("kustomization.yaml")).unwrap(),
    )
    .unwrap();
    let listed: BTreeSet<String> = k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    let want: BTreeSet<String> = manifest_files().into_iter().collect();
    assert_eq!(
        listed, want,
        "kustomization.yaml resources vs deploy/*.yaml"
    );
    assert_eq!(k["namespace"], "wasmprov");

    // What `kubectl apply -k` would apply: kustomize itself builds it.
    let built = build(false);
    assert_eq!(built.len(), all_objects().len());
    in_the_namespace(&built);
}

/// Every namespaced object of a build is in `wasmprov`, and so is every
/// ServiceAccount its bindings name.
fn in_the_namespace(built: &[Object]) {
    for o in built {
        let namespaced = !matches!(
            o.kind(),
            "Namespace" | "ClusterRole" | "ClusterRoleBinding" | "StorageClass" | "CSIDriver"
        );
        let ns = o.value["metadata"]["namespace"].as_str();
        assert_eq!(
            ns,
            namespaced.then_some("wasmprov"),
            "{} {}",
            o.kind(),
            o.name()
        );
        for s in o.value["subjects"].as_array().into_iter().flatten() {
            assert_eq!(s["namespace"], "wasmprov", "{} {}", o.kind(), o.name());
        }
    }
}

// ---------------------------------------------------------------------------
// The API plugin source: deploy/api-source/

fn api_source_dir() -> PathBuf {
    deploy_dir().join("api-source")
}

/// The resources the component adds, as written in deploy/api-source/.
fn api_source_resources() -> Vec<Object> {
    let k: Value = serde_yaml::from_str(
        &std::fs::read_to_string(api_source_dir().join("kustomization.yaml")).unwrap(),
    )
    .unwrap();
    k["resources"]
        .as_array()
        .expect("the component lists its resources")
        .iter()
        .map(|r| r.as_str().unwrap())
        .flat_map(|f| {
            documents(
                &format!("api-source/{f}"),
                &std::fs::read_to_string(api_source_dir().join(f)).unwrap(),
            )
        })
        .collect()
}

/// An overlay of the user's own, outside deploy/ (kustomize refuses an
/// overlay inside its base's directory): deploy/api-source/README.md shows it.
const OWN_OVERLAY: &str = "\
namespace: wasmprov
resources: [../deploy]
components: [../deploy/api-source]
";

#[test]
fn the_api_source_component_swaps_the_plugins_volume_for_the_api() {
    // A kustomize Component, enabled the way its README says.
    let k: Value = serde_yaml::from_str(
        &std::fs::read_to_string(api_source_dir().join("kustomization.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(k["apiVersion"], "kustomize.config.k8s.io/v1alpha1");
    assert_eq!(k["kind"], "Component");
    let readme = std::fs::read_to_string(api_source_dir().join("README.md")).unwrap();
    assert!(
        readme.contains(ENABLE_API_SOURCE),
        "deploy/api-source/README.md says to add `{ENABLE_API_SOURCE}`"
    );
    for line in OWN_OVERLAY.lines() {
        assert!(
            readme.contains(line),
            "the README's own overlay has {line:?}"
        );
    }

    // Its own files: strict, namespaced by the kustomization that uses it.
    let own = api_source_resources();
    assert_eq!(
        own.iter().map(Object::kind).collect::<Vec<_>>(),
        ["Role", "RoleBinding"]
    );
    for o in &own {
        assert_eq!(strict(o), Vec::<String>::new(), "{} {}", o.file, o.name());
        assert!(o.value["metadata"].get("namespace").is_none());
    }

    // The build: everything strict and in the namespace.
    let base = build(false);
    let with = build(true);
    in_the_namespace(&with);
    let problems: Vec<String> = with
        .iter()
        .flat_map(|o| {
            strict(o)
                .into_iter()
                .map(move |p| format!("{} {}: {p}", o.kind(), o.name()))
        })
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));

    // It adds the Role and its binding, and changes the hosts only.
    let key = |o: &Object| (o.kind().to_owned(), o.name().to_owned());
    let before: BTreeSet<_> = base.iter().map(key).collect();
    let after: BTreeSet<_> = with.iter().map(key).collect();
    let added: Vec<_> = after.difference(&before).cloned().collect();
    let wanted: Vec<_> = own.iter().map(key).collect();
    assert_eq!(added, wanted);
    assert!(before.is_subset(&after));
    for o in &base {
        let w = with.iter().find(|w| key(w) == key(o)).unwrap();
        if !matches!(o.kind(), "Deployment" | "DaemonSet") {
            assert_eq!(o.value, w.value, "{} {} is unchanged", o.kind(), o.name());
        }
    }

    // Each host: --plugin-configmaps instead of --plugins-dir, and no
    // plugins volume; nothing else changes.
    let mut plugins_dir = String::new();
    for kind in ["Deployment", "DaemonSet"] {
        let base_w = workload(&base, kind);
        plugins_dir = flag(&base_w.container(), "plugins-dir").unwrap();
        let (volume, _) = volume_at(&base_w.pod, &plugins_dir).unwrap();
        let mut expected = one(&base, kind).value.clone();
        let pod = &mut expected["spec"]["template"]["spec"];
        pod["volumes"]
            .as_array_mut()
            .unwrap()
            .retain(|v| v["name"] != volume.name.as_str());
        let c = &mut pod["containers"][0];
        c["volumeMounts"]
            .as_array_mut()
            .unwrap()
            .retain(|m| m["name"] != volume.name.as_str());
        for a in c["args"].as_array_mut().unwrap() {
            if *a == format!("--plugins-dir={plugins_dir}") {
                *a = json!("--plugin-configmaps");
            }
        }
        assert_eq!(one(&with, kind).value, expected, "{kind}");
        let mut argv = vec!["wasmprov".to_owned()];
        argv.extend(workload(&with, kind).container().args.unwrap_or_default());
        match Cli::try_parse_from(&argv).unwrap().command {
            wasmprov::cli::Command::Run(run) => {
                assert!(run.plugin_configmaps);
                assert!(run.plugins_dir.is_none());
            }
            other => panic!("{other:?}"),
        }
    }
    // The plugin ConfigMap the base installs is one the API source reads.
    let plugin = with
        .iter()
        .find(|o| o.kind() == "ConfigMap" && o.name() == package::config_map_name("hostpath"))
        .unwrap();
    assert_eq!(
        plugin.value["metadata"]["labels"][package::PLUGIN_LABEL],
        "hostpath"
    );

    // A user's own overlay builds the same.
    let dir = deploy_copy(false);
    let mine = dir.path().join("my-wasmprov");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("kustomization.yaml"), OWN_OVERLAY).unwrap();
    let values = |objects: &[Object]| objects.iter().map(|o| o.value.clone()).collect::<Vec<_>>();
    assert_eq!(values(&kustomize(&mine).unwrap()), values(&with));

    // If a host's arguments move, the build fails rather than replacing
    // another argument.
    for file in ["deployment.yaml", "daemonset.yaml"] {
        let dir = deploy_copy(true);
        let path = dir.path().join("deploy").join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        let moved = text.replace(&format!("- --plugins-dir={plugins_dir}\n"), "");
        assert_ne!(moved, text);
        std::fs::write(&path, moved).unwrap();
        let err = kustomize(&dir.path().join("deploy")).unwrap_err();
        assert!(err.contains("test failed"), "{file}: {err}");
    }
}

#[tokio::test]
async fn the_api_source_install_applies_to_the_simulator() {
    let (_sim, client) = simulator().await;
    apply_all(&client, &build(true)).await;
    let ns = namespace();
    let role: Role = Api::namespaced(client.clone(), &ns)
        .get("wasmprov-plugin-configmaps")
        .await
        .unwrap();
    assert_eq!(role.rules.unwrap().len(), 1);
    let d: Deployment = Api::namespaced(client.clone(), &ns)
        .get("wasmprov")
        .await
        .unwrap();
    let ds: DaemonSet = Api::namespaced(client.clone(), &ns)
        .get("wasmprov-node")
        .await
        .unwrap();
    for template in [d.spec.unwrap().template, ds.spec.unwrap().template] {
        let args = template.spec.unwrap().containers[0].args.clone().unwrap();
        assert!(args.contains(&"--plugin-configmaps".to_owned()), "{args:?}");
    }
}

// ---------------------------------------------------------------------------
// The hosts, their flags and the sandbox policy

/// Environment variables `wasmprov run` reads: each flag's `env`, plus those
/// read directly by host/src/cli/run.rs, with the flags they stand for.
fn host_env() -> BTreeMap<String, Vec<String>> {
    let cli = Cli::command();
    let run = cli.find_subcommand("run").unwrap();
    let mut env: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for a in cli.get_arguments().chain(run.get_arguments()) {
        if let (Some(name), Some(long)) = (a.get_env(), a.get_long()) {
            env.entry(name.to_string_lossy().into_owned())
                .or_default()
                .push(long.to_owned());
        }
    }
    // run.rs's pod_namespace(): the default of both namespaces.
    let run_rs: String = include_str!("../src/cli/run.rs")
        .split_whitespace()
        .collect();
    assert!(
        run_rs.contains("std::env::var(\"POD_NAMESPACE\")"),
        "run.rs no longer reads POD_NAMESPACE: update deploy/deployment.yaml and this test"
    );
    for flag in ["leader-election-namespace", "plugins-namespace"] {
        let field = flag.replace('-', "_");
        assert!(
            run_rs.contains(&format!("{field}.clone().unwrap_or_else(pod_namespace)")),
            "run.rs no longer defaults --{flag} to $POD_NAMESPACE: update this test"
        );
        env.entry("POD_NAMESPACE".into())
            .or_default()
            .push(flag.into());
    }
    env
}

/// `flag=value` pairs of the container's arguments.
fn flag(c: &Container, name: &str) -> Option<String> {
    let prefix = format!("--{name}=");
    c.args
        .iter()
        .flatten()
        .find_map(|a| a.strip_prefix(&prefix).map(str::to_owned))
}

#[test]
fn each_host_runs_with_flags_it_accepts() {
    let objects = all_objects();
    for w in workloads(&objects) {
        let c = w.container();
        let what = format!("{} {}", w.kind, w.name);
        assert_eq!(c.image.as_deref(), Some("ghcr.io/wasmprov/wasmprov:0.1.0"));
        let mut argv = vec!["wasmprov".to_owned()];
        argv.extend(c.args.clone().unwrap_or_default());
        let cli =
            Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{what}'s args {argv:?}: {e}"));
        assert!(matches!(cli.command, wasmprov::cli::Command::Run(_)));

        let env = host_env();
        for e in c.env.iter().flatten() {
            assert!(
                env.contains_key(&e.name),
                "{what}: env {} is read by no flag of `wasmprov run` (known: {:?})",
                e.name,
                env.keys()
            );
        }
        let field = |name: &str| {
            c.env
                .iter()
                .flatten()
                .find(|e| e.name == name)
                .and_then(|e| e.value_from.as_ref()?.field_ref.as_ref())
                .map(|f| f.field_path.clone())
        };
        assert_eq!(field("POD_NAME").as_deref(), Some("metadata.name"));
        assert_eq!(
            field("POD_NAMESPACE").as_deref(),
            Some("metadata.namespace")
        );
        assert!(
            flag(&c, "leader-election").is_none_or(|v| v == "true"),
            "{what}: replicas elect a leader, node hosts a janitor"
        );
        assert!(
            flag(&c, "provisioner-name").is_none(),
            "{what}: the default names"
        );
        match w.side() {
            RunsOn::Central => {
                let d: Deployment = one(&objects, "Deployment").typed();
                assert_eq!(d.spec.unwrap().replicas, Some(2));
                assert_eq!(field("NODE_NAME"), None, "{what}: a central host");
                assert_eq!(w.service_account(), "wasmprov");
            }
            RunsOn::Node => {
                // Node mode: --node-name from the node the pod runs on, on
                // every node whatever its taints.
                assert_eq!(env["NODE_NAME"], ["node-name"]);
                assert_eq!(field("NODE_NAME").as_deref(), Some("spec.nodeName"));
                let tolerations = w.pod.tolerations.clone().unwrap_or_default();
                assert!(
                    tolerations
                        .iter()
                        .any(|t| t.operator.as_deref() == Some("Exists") && t.key.is_none()),
                    "{what} tolerates every taint: {tolerations:?}"
                );
                assert_eq!(w.service_account(), "wasmprov-node");
            }
        }
        let psc = w.pod.security_context.clone().unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(psc.run_as_user, Some(65532));
        assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let sc = c.security_context.clone().unwrap();
        assert_eq!(sc.run_as_non_root, Some(true));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_owned()]));
        let resources = c.resources.clone().unwrap();
        for what in ["cpu", "memory"] {
            assert!(resources.requests.as_ref().unwrap().contains_key(what));
            assert!(resources.limits.as_ref().unwrap().contains_key(what));
        }
        // The compiler child fits in the container's memory beside the host.
        let limit =
            wasmprov::quantity::parse_bytes(&resources.limits.as_ref().unwrap()["memory"].0)
                .unwrap();
        let compile = flag(&c, "compile-memory-limit").unwrap_or_else(|| "512Mi".into());
        let compile = wasmprov::quantity::parse_bytes(&compile).unwrap();
        assert!(
            compile + 64 * 1024 * 1024 <= limit,
            "{what}: --compile-memory-limit {compile} leaves the host too little of {limit}"
        );

        // Probes on the metrics port, which is where the host serves them.
        let port = c.ports.as_ref().unwrap().first().unwrap();
        let metrics_port = flag(&c, "metrics-address").unwrap_or_else(|| "0.0.0.0:8080".into());
        assert_eq!(
            metrics_port.rsplit(':').next(),
            Some(port.container_port.to_string().as_str())
        );
        for (probe, path) in [
            (c.liveness_probe.clone(), "/healthz"),
            (c.readiness_probe.clone(), "/readyz"),
        ] {
            let get = probe.unwrap().http_get.unwrap();
            assert_eq!(get.path.as_deref(), Some(path));
            use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
            let on_metrics = match &get.port {
                IntOrString::String(name) => Some(name) == port.name.as_ref(),
                IntOrString::Int(n) => *n == port.container_port,
            };
            assert!(on_metrics, "{what}: {path} probes the metrics port");
        }
    }
}

/// The pod's volume mounted at `path` (or a parent), and the path inside it.
fn volume_at<'a>(
    pod: &'a PodSpec,
    path: &str,
) -> Option<(&'a k8s_openapi::api::core::v1::Volume, String)> {
    let c = &pod.containers[0];
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| path == m.mount_path || path.starts_with(&format!("{}/", m.mount_path)))
        .max_by_key(|m| m.mount_path.len())?;
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)?;
    let rest = path[mount.mount_path.len()..]
        .trim_start_matches('/')
        .to_owned();
    Some((volume, rest))
}

/// The sandbox policy as the host `w` reads it: `--policy` a key of the
/// policy ConfigMap mounted as a directory (a subPath mount would never see
/// an update), its preopens made under `root` (the host checks that they
/// exist), for `w`'s side.
fn policy_of(objects: &[Object], w: &Workload, root: &Path) -> PolicySet {
    let c = w.container();
    let policy_path = flag(&c, "policy").expect("--policy");
    let (volume, key) = volume_at(&w.pod, &policy_path).expect("--policy is on a mounted volume");
    let cm_name = &volume.config_map.as_ref().expect("a configMap volume").name;
    let policy_cm: ConfigMap = objects
        .iter()
        .find(|o| o.kind() == "ConfigMap" && o.name() == cm_name)
        .expect("the policy ConfigMap is in deploy/")
        .typed();
    assert!(c
        .volume_mounts
        .iter()
        .flatten()
        .all(|m| m.sub_path.is_none()));
    // Preopens and granted output paths name the container's mounts.
    let mut text = policy_cm.data.as_ref().unwrap()[&key].clone();
    for m in c.volume_mounts.iter().flatten() {
        let local = root.join(m.mount_path.trim_start_matches('/'));
        std::fs::create_dir_all(&local).unwrap();
        for (before, after) in [("host: ", "host: "), ("paths: [", "paths: [")] {
            text = text.replace(
                &format!("{before}{}", m.mount_path),
                &format!("{after}{}", local.display()),
            );
        }
    }
    PolicySet::parse_for(&text, Path::new(&policy_path), w.side()).unwrap_or_else(|e| {
        panic!(
            "the policy in {cm_name}, as {} {} reads it: {e}",
            w.kind, w.name
        )
    })
}

#[test]
fn the_policy_grants_what_each_host_mounts_and_the_classes_use() {
    let objects = all_objects();
    let classes: Vec<StorageClass> = objects
        .iter()
        .filter(|o| o.kind() == "StorageClass")
        .map(Object::typed)
        .collect();
    let mut served = BTreeSet::new();
    for w in workloads(&objects) {
        let c = w.container();
        let root = tempfile::tempdir().unwrap();
        let policies = policy_of(&objects, &w, root.path());
        let in_container = |p: &Path| Path::new("/").join(p.strip_prefix(root.path()).unwrap());

        // --plugins-dir is the projected volume of the plugin ConfigMaps,
        // first in the list (deploy/README.md's patch appends to volumes/0).
        let plugins_dir = flag(&c, "plugins-dir").expect("--plugins-dir");
        let (volume, rest) = volume_at(&w.pod, &plugins_dir).expect("--plugins-dir is mounted");
        assert!(rest.is_empty());
        assert_eq!(w.pod.volumes.as_ref().unwrap()[0].name, volume.name);
        let sources: BTreeSet<String> = volume
            .projected
            .as_ref()
            .expect("a projected volume")
            .sources
            .iter()
            .flatten()
            .filter_map(|s| Some(s.config_map.as_ref()?.name.clone()))
            .collect();
        // It mounts the ConfigMaps of the plugins its side serves, no other.
        let wanted: BTreeSet<String> = policies
            .plugin_names()
            .map(package::config_map_name)
            .collect();
        assert_eq!(sources, wanted, "{} {}'s plugins", w.kind, w.name);

        // --cache-dir is writable scratch space (the root filesystem is not).
        let cache = flag(&c, "cache-dir").expect("--cache-dir");
        assert!(volume_at(&w.pod, &cache).unwrap().0.empty_dir.is_some());

        // Every preopen is a hostPath volume mounted at the same path, so
        // the path the plugin reports in a PersistentVolume is the node's.
        for plugin in policies.plugin_names() {
            for p in policies.sandbox_for(plugin).preopens {
                let host = in_container(&p.host);
                let host = host.to_str().unwrap();
                let (volume, rest) = volume_at(&w.pod, host).unwrap_or_else(|| {
                    panic!("preopen {host} of {plugin} is mounted in no volume")
                });
                let node_path = &volume.host_path.as_ref().expect("a hostPath volume").path;
                assert_eq!(
                    Path::new(node_path).join(&rest),
                    Path::new(host),
                    "mount {host} at its node path"
                );
            }
        }

        // Each class of this side's provisioner names a plugin it serves,
        // whose policy preopens the class's hostRoot read-write at the guest
        // path the plugin uses.
        for class in classes.iter().filter(|c| c.provisioner == w.provisioner()) {
            let name = class.metadata.name.as_deref().unwrap();
            let params = class.parameters.clone().unwrap();
            let plugin = &params["plugin"];
            policies
                .serves(plugin)
                .unwrap_or_else(|e| panic!("class {name}: {e}"));
            let root = params
                .get("root")
                .cloned()
                .unwrap_or_else(|| "/volumes".into());
            let policy = policies.sandbox_for(plugin);
            assert!(
                policy
                    .preopens
                    .iter()
                    .any(|p| in_container(&p.host) == Path::new(&params["hostRoot"])
                        && p.guest == root
                        && p.mode == DirMode::ReadWrite),
                "class {name}: hostRoot {} is preopened read-write at {root}",
                params["hostRoot"]
            );
            served.insert(name.to_owned());
        }
    }
    let all: BTreeSet<String> = classes
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(served, all, "every class is served by one of the hosts");
    // The node-local classes wait for the scheduler (no node host takes an
    // Immediate claim): one per reclaim policy.
    let modes: BTreeSet<(String, String)> = classes
        .iter()
        .map(|c| {
            (
                c.volume_binding_mode.clone().unwrap(),
                c.reclaim_policy.clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        modes,
        [
            ("WaitForFirstConsumer", "Delete"),
            ("WaitForFirstConsumer", "Retain")
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .into()
    );
}

/// deploy/plugin-hostpath.yaml is what `wasmprov plugin pack` makes of the
/// hostpath plugin built from this commit.
#[test]
fn the_committed_plugin_configmap_is_the_current_hostpath_plugin() {
    let committed = std::fs::read_to_string(deploy_dir().join(PLUGIN_MANIFEST)).unwrap();
    let fresh = hostpath_plugin_manifest();
    let header = |text: &str| text.lines().next().unwrap_or_default().to_owned();
    assert!(
        committed == fresh,
        "deploy/{PLUGIN_MANIFEST} is not the current hostpath plugin (committed: {:?}, built now: {:?}); make it again with\n  {REGENERATE}",
        header(&committed),
        header(&fresh)
    );
}

#[tokio::test]
async fn the_plugin_configmap_holds_a_valid_component() {
    let cm: ConfigMap = one(
        &documents(
            PLUGIN_MANIFEST,
            &std::fs::read_to_string(deploy_dir().join(PLUGIN_MANIFEST)).unwrap(),
        ),
        "ConfigMap",
    )
    .typed();
    assert_eq!(
        cm.metadata.name.as_deref(),
        Some("wasmprov-plugin-hostpath")
    );
    assert_eq!(
        cm.metadata.labels.as_ref().unwrap()["wasmprov.io/plugin"],
        "hostpath"
    );
    let files = cm.binary_data.clone().unwrap();
    assert_eq!(files.len(), 1, "one file: {:?}", files.keys());
    let (file, bytes) = files.into_iter().next().unwrap();
    let (name, encoding) = wasmprov::delivery::encoding::plugin_file(&file)
        .unwrap_or_else(|| panic!("{file} is not a plugin file name"));
    assert_eq!(name, "hostpath");
    let wasm = wasmprov::delivery::encoding::decode(encoding, bytes.0).unwrap();
    support::runtime()
        .load("hostpath", &wasm, Default::default())
        .await
        .expect("a component of the provisioner world");
}

// ---------------------------------------------------------------------------
// On the simulated API server

/// `kubectl apply --server-side` of every object, with strict field validation.
async fn apply_all(client: &Client, objects: &[Object]) {
    let ns = namespace();
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    // In the order kustomize emits them (what `kubectl apply -k` does).
    const ORDER: &[&str] = &[
        "Namespace",
        "StorageClass",
        "ServiceAccount",
        "Role",
        "ClusterRole",
        "RoleBinding",
        "ClusterRoleBinding",
        "ConfigMap",
        "PersistentVolumeClaim",
        "Deployment",
        // Kinds kustomize has no place for come next, by name.
        "CSIDriver",
        "DaemonSet",
        "Pod",
    ];
    let mut ordered: Vec<&Object> = objects.iter().collect();
    ordered.sort_by_key(|o| {
        ORDER
            .iter()
            .position(|k| *k == o.kind())
            .unwrap_or_else(|| panic!("{}: where does kustomize put it?", o.kind()))
    });
    for o in ordered {
        let (group, version) = match o.value["apiVersion"].as_str().unwrap().split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", o.value["apiVersion"].as_str().unwrap()),
        };
        let gvk = GroupVersionKind::gvk(group, version, o.kind());
        let (resource, caps) = discovery
            .resolve_gvk(&gvk)
            .unwrap_or_else(|| panic!("the simulator does not serve {gvk:?}"));
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(client.clone(), &ns, &resource),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        let params = PatchParams {
            field_manager: Some("kubectl".into()),
            field_validation: Some(ValidationDirective::Strict),
            ..PatchParams::default()
        };
        api.patch(o.name(), &params, &Patch::Apply(&o.value))
            .await
            .unwrap_or_else(|e| panic!("apply {} {} ({}): {e}", o.kind(), o.name(), o.file));
    }
}

/// The simulator as the deploy tests want it.
fn simulator_config() -> kube_sim::Config {
    kube_sim::Config {
        nodes: NODES.map(String::from).to_vec(),
        record_requests: true,
        // The PV controller annotates a claim whose class appears late at
        // its next resync (15 s on a real cluster): shorter here.
        controllers: kube_sim::ControllerConfig {
            resync: Duration::from_millis(500),
            ..kube_sim::ControllerConfig::default()
        },
        ..kube_sim::Config::default()
    }
}

async fn simulator() -> (kube_sim::Simulator, Client) {
    let sim = kube_sim::Simulator::start(simulator_config())
        .await
        .unwrap();
    let client = sim.client().unwrap();
    (sim, client)
}

#[tokio::test]
async fn the_manifests_apply_to_the_simulator() {
    let (_sim, client) = simulator().await;
    let objects = all_objects();
    apply_all(&client, &objects).await;
    let ns = namespace();
    let d: Deployment = Api::namespaced(client.clone(), &ns)
        .get("wasmprov")
        .await
        .unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(2));
    Api::<DaemonSet>::namespaced(client.clone(), &ns)
        .get("wasmprov-node")
        .await
        .unwrap();
    let classes = Api::<StorageClass>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(classes.items.len(), 2);
    let cm: ConfigMap = Api::namespaced(client.clone(), &ns)
        .get("wasmprov-plugin-hostpath")
        .await
        .unwrap();
    assert_eq!(cm.binary_data.unwrap().len(), 1);
}

/// What kubelet would give the host container: each volume mount made real
/// in a temporary directory, ConfigMaps written the way kubelet writes them
/// (a `..data` symlink to a timestamped directory). Paths of the container
/// map to these directories ([`Pod::local`]).
struct Pod {
    _root: tempfile::TempDir,
    /// (container mount path, local directory), longest first.
    mounts: Vec<(String, PathBuf)>,
}

impl Pod {
    /// `node` holds the node's hostPath directories, shared by the pods.
    async fn start(client: &Client, w: &Workload, node: &Path) -> Pod {
        let root = tempfile::tempdir().unwrap();
        let pod = &w.pod;
        let ns = namespace();
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let mut mounts = Vec::new();
        for m in w.container().volume_mounts.iter().flatten() {
            let v = pod
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == m.name)
                .unwrap_or_else(|| panic!("mount of undefined volume {}", m.name));
            let local = root.path().join(&v.name);
            let mut sources = Vec::new();
            if let Some(p) = &v.projected {
                for s in p.sources.iter().flatten() {
                    let cm = s
                        .config_map
                        .as_ref()
                        .expect("only ConfigMaps are projected");
                    assert!(cm.items.is_none());
                    sources.push((cm.name.clone(), cm.optional.unwrap_or(false)));
                }
            } else if let Some(cm) = &v.config_map {
                assert!(cm.items.is_none());
                sources.push((cm.name.clone(), cm.optional.unwrap_or(false)));
            }
            if v.projected.is_some() || v.config_map.is_some() {
                let mut files = BTreeMap::new();
                for (name, optional) in sources {
                    match configmaps.get_opt(&name).await.unwrap() {
                        Some(cm) => {
                            for (k, text) in cm.data.unwrap_or_default() {
                                files.insert(k, text.into_bytes());
                            }
                            for (k, bytes) in cm.binary_data.unwrap_or_default() {
                                files.insert(k, bytes.0);
                            }
                        }
                        None => assert!(
                            optional,
                            "kubelet cannot start the pod: ConfigMap {name} is missing"
                        ),
                    }
                }
                write_like_kubelet(&local, &files);
            } else if v.empty_dir.is_some() {
                std::fs::create_dir_all(&local).unwrap();
            } else if let Some(h) = &v.host_path {
                let on_node = node.join(h.path.trim_start_matches('/'));
                std::fs::create_dir_all(&on_node).unwrap_or_else(|e| {
                    panic!(
                        "make the node's {} as a kubelet would (run the tests as root): {e}",
                        on_node.display()
                    )
                });
                mounts.push((m.mount_path.clone(), on_node));
                continue;
            } else {
                panic!("volume {}: a kind this test does not make", v.name);
            }
            mounts.push((m.mount_path.clone(), local));
        }
        mounts.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        Pod {
            _root: root,
            mounts,
        }
    }

    /// Where a path of the container is in this test.
    fn local(&self, path: &str) -> Option<String> {
        self.mounts.iter().find_map(|(mount, local)| {
            let rest = path.strip_prefix(mount.as_str())?;
            (rest.is_empty() || rest.starts_with('/')).then(|| format!("{}{rest}", local.display()))
        })
    }
}

fn write_like_kubelet(dir: &Path, files: &BTreeMap<String, Vec<u8>>) {
    let stamp = "..2026_01_01_00_00_00.000000001";
    std::fs::create_dir_all(dir.join(stamp)).unwrap();
    for (name, bytes) in files {
        std::fs::write(dir.join(stamp).join(name), bytes).unwrap();
        std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name)).unwrap();
    }
    std::os::unix::fs::symlink(stamp, dir.join("..data")).unwrap();
}

/// One pod of a host: `wasmprov run` with the container's args and env
/// (downward API filled in as for pod `name` on node `node`), its paths
/// mapped into `pod`, talking to the API server as the ServiceAccount.
fn replica(
    w: &Workload,
    pod: &Pod,
    name: &str,
    node: &str,
    kubeconfig: &Path,
    extra: &[&str],
) -> Cli {
    let c = w.container();
    let ns = namespace();
    let mut argv = vec!["wasmprov".to_owned()];
    for arg in c.args.iter().flatten() {
        let mapped = match arg.split_once('=') {
            Some((flag, value)) if value.starts_with('/') => {
                format!(
                    "{flag}={}",
                    pod.local(value)
                        .unwrap_or_else(|| panic!("{arg}: on no volume"))
                )
            }
            _ => arg.clone(),
        };
        argv.push(mapped);
    }
    let env = host_env();
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => v.clone(),
            (None, Some(from)) => match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                Some("metadata.name") => name.to_owned(),
                Some("metadata.namespace") => ns.clone(),
                Some("spec.nodeName") => node.to_owned(),
                // No Pod object stands for these hosts: an owner reference
                // to one would have the garbage collector delete what the
                // host owns. An empty UID is none.
                Some("metadata.uid") => String::new(),
                other => panic!("env {}: downward API field {other:?} not simulated", e.name),
            },
            _ => String::new(),
        };
        for flag in &env[&e.name] {
            argv.push(format!("--{flag}={value}"));
        }
    }
    argv.extend(extra.iter().map(|a| a.to_string()));
    argv.push(format!("--kubeconfig={}", kubeconfig.display()));
    argv.push("--metrics-address=127.0.0.1:0".to_owned());
    // The host runs in this test process: plugins compile in the real binary.
    argv.push(format!("--compiler={}", env!("CARGO_BIN_EXE_wasmprov")));
    Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"))
}

/// One permission of rbac.yaml.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    /// None: cluster-wide (ClusterRole).
    namespace: Option<String>,
    group: String,
    resource: String,
    verb: String,
    names: Vec<String>,
}

impl Grant {
    fn allows(&self, r: &kube_sim::ApiRequest) -> bool {
        self.namespace.as_ref().is_none_or(|ns| *ns == r.namespace)
            && self.group == r.api_group
            && self.resource
                == if r.subresource.is_empty() {
                    r.resource.clone()
                } else {
                    format!("{}/{}", r.resource, r.subresource)
                }
            && self.verb == r.verb
            && (self.names.is_empty() || self.names.contains(&r.name))
    }
}

/// The rules bound to ServiceAccount `sa`.
fn grants(objects: &[Object], ns: &str, sa: &str) -> Vec<Grant> {
    let expand = |rules: Vec<PolicyRule>, namespace: Option<String>| {
        let mut out = Vec::new();
        for rule in rules {
            assert!(rule.non_resource_urls.is_none());
            for g in rule.api_groups.iter().flatten() {
                for r in rule.resources.iter().flatten() {
                    for v in &rule.verbs {
                        assert!(g != "*" && r != "*" && v != "*", "no wildcards");
                        out.push(Grant {
                            namespace: namespace.clone(),
                            group: g.clone(),
                            resource: r.clone(),
                            verb: v.clone(),
                            names: rule.resource_names.clone().unwrap_or_default(),
                        });
                    }
                }
            }
        }
        out
    };
    let bound = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount" && s.name == sa && s.namespace.as_deref() == Some(ns)
        })
    };
    let mut out = Vec::new();
    for o in objects {
        match o.kind() {
            "ClusterRoleBinding" => {
                let b: ClusterRoleBinding = o.typed();
                if !bound(&b.subjects) {
                    continue;
                }
                assert_eq!(b.role_ref.kind, "ClusterRole");
                let role: ClusterRole = objects
                    .iter()
                    .find(|r| r.kind() == "ClusterRole" && r.name() == b.role_ref.name)
                    .expect("the bound ClusterRole is in deploy/")
                    .typed();
                out.extend(expand(role.rules.unwrap_or_default(), None));
            }
            "RoleBinding" => {
                let b: RoleBinding = o.typed();
                if !bound(&b.subjects) {
                    continue;
                }
                assert_eq!(b.role_ref.kind, "Role");
                let role: Role = objects
                    .iter()
                    .find(|r| r.kind() == "Role" && r.name() == b.role_ref.name)
                    .expect("the bound Role is in deploy/")
                    .typed();
                out.extend(expand(role.rules.unwrap_or_default(), Some(ns.to_owned())));
            }
            _ => {}
        }
    }
    out
}

fn describe(r: &kube_sim::ApiRequest) -> String {
    format!(
        "{} {}{}{} {} in {:?}",
        r.verb,
        if r.api_group.is_empty() {
            ""
        } else {
            &r.api_group
        },
        if r.api_group.is_empty() { "" } else { "/" },
        if r.subresource.is_empty() {
            r.resource.clone()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        },
        r.name,
        r.namespace
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_allows_exactly_the_calls_the_host_makes() {
    the_host_calls_exactly_what_rbac_allows(Server::Simulated, false).await;
}

/// The same with the API source enabled (deploy/api-source/): the host
/// reads the hostpath plugin from its packed ConfigMap (no directory),
/// provisions with it, and swaps in a new version applied to the ConfigMap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rbac_with_the_api_source_allows_exactly_the_calls_the_host_makes() {
    the_host_calls_exactly_what_rbac_allows(Server::Simulated, true).await;
}

/// On a real control plane: `kubectl apply --server-side -k deploy/`, the
/// replicas authenticated by their ServiceAccount's own token (TokenRequest)
/// and authorized by the real RBAC authorizer, their requests read from the
/// API server's audit log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_real_cluster_rbac_allows_exactly_the_calls_the_host_makes() {
    the_host_calls_exactly_what_rbac_allows(Server::Real, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_real_cluster_rbac_with_the_api_source_allows_exactly_the_calls_the_host_makes() {
    the_host_calls_exactly_what_rbac_allows(Server::Real, true).await;
}

/// Installs deploy/ as a user does: on the real server with `kubectl apply
/// --server-side -k`; on the simulator object by object. Returns what it
/// applied.
async fn install(api: &TestApi, client: &Client, api_source: bool) -> Vec<Object> {
    match api {
        TestApi::Simulated(_) => {
            let objects = if api_source {
                build(true)
            } else {
                all_objects()
            };
            apply_all(client, &objects).await;
            objects
        }
        TestApi::Real(cluster) => {
            let dir = deploy_copy(api_source);
            let deploy = dir.path().join("deploy");
            let out = cluster
                .kubectl()
                .args(["apply", "--server-side", "-k"])
                .arg(&deploy)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "kubectl apply --server-side -k deploy/: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            kustomize(&deploy).unwrap()
        }
    }
}

/// A kubeconfig file for the pods of `w`: on the real server the
/// ServiceAccount's own token, as kubelet would mount it.
async fn host_kubeconfig(api: &TestApi, w: &Workload, dir: &Path) -> PathBuf {
    let text = match api {
        TestApi::Simulated(sim) => sim.kubeconfig_with_token(&w.user()),
        TestApi::Real(cluster) => {
            let token = cluster
                .service_account_token(&namespace(), &w.service_account())
                .await
                .unwrap();
            cluster.kubeconfig_with_token(&token)
        }
    };
    let path = dir.join(format!("{}.kubeconfig", w.name));
    std::fs::write(&path, text).unwrap();
    path
}

/// The resource requests of `user` so far: the simulator's request log,
/// or the real API server's audit log.
fn host_requests(api: &TestApi, user: &str) -> Vec<kube_sim::ApiRequest> {
    let all = match api {
        TestApi::Simulated(sim) => sim.requests(),
        TestApi::Real(cluster) => cluster
            .audit_events()
            .into_iter()
            .map(|e| kube_sim::ApiRequest {
                user: e.user,
                verb: e.verb,
                api_group: e.api_group,
                resource: e.resource,
                subresource: e.subresource,
                namespace: e.namespace,
                name: e.name,
            })
            .collect(),
    };
    all.into_iter().filter(|r| r.user == user).collect()
}

/// The backend the scenario adds to the central hosts, as deploy/README.md's
/// "Add a backend" says: the hostpath plugin under another name, standing in
/// for a network backend. Its directory plays a filesystem every node mounts
/// at the same place (an NFS share), so its policy says
/// `sharedFilesystem: true` and a central host may serve it on any cluster.
const SHARED: &str = "shared";
const SHARED_ROOT: &str = "/var/lib/wasmprov-shared";

/// "Add a backend", steps 2 to 4, through the API as kubectl would: the
/// plugin's ConfigMap, listed in the Deployment's plugins volume (with the
/// API source, the ConfigMap is enough), the share mounted, a policy entry
/// and a StorageClass.
async fn add_a_shared_backend(client: &Client, api_source: bool) {
    let ns = namespace();
    let apply = PatchParams {
        field_manager: Some("kubectl".into()),
        field_validation: Some(ValidationDirective::Strict),
        ..PatchParams::default()
    };
    let packed = support::pack(
        Path::new(env!("CARGO_BIN_EXE_wasmprov")),
        &support::rust_plugin_path("hostpath"),
        SHARED,
    );
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    for o in documents("plugin pack", std::str::from_utf8(&packed).unwrap()) {
        configmaps
            .patch(o.name(), &apply, &Patch::Apply(&o.value))
            .await
            .unwrap();
    }
    // The share mounted, and (the directory source) the ConfigMap listed in
    // the plugins volume: deployment.yaml edited and applied again.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let mut d = deployments.get("wasmprov").await.unwrap();
    let pod = d.spec.as_mut().unwrap().template.spec.as_mut().unwrap();
    let volumes = pod.volumes.get_or_insert_with(Vec::new);
    volumes.push(
        serde_json::from_value(json!({"name": "share", "hostPath": {"path": SHARED_ROOT, "type": "DirectoryOrCreate"}}))
            .unwrap(),
    );
    if !api_source {
        let plugins = volumes.iter_mut().find(|v| v.name == "plugins").unwrap();
        let projected = plugins.projected.as_mut().unwrap();
        projected.sources.get_or_insert_with(Vec::new).push(
            serde_json::from_value(
                json!({"configMap": {"name": package::config_map_name(SHARED)}}),
            )
            .unwrap(),
        );
    }
    pod.containers[0]
        .volume_mounts
        .get_or_insert_with(Vec::new)
        .push(serde_json::from_value(json!({"name": "share", "mountPath": SHARED_ROOT})).unwrap());
    deployments
        .replace("wasmprov", &PostParams::default(), &d)
        .await
        .unwrap();
    support::add_shared_backend_policy(&configmaps, SHARED, SHARED_ROOT).await;
    Api::<StorageClass>::all(client.clone())
        .create(
            &PostParams::default(),
            &class(
                SHARED,
                CENTRAL_PROVISIONER,
                SHARED,
                SHARED_ROOT,
                "Immediate",
            ),
        )
        .await
        .unwrap();
}

fn class(name: &str, provisioner: &str, plugin: &str, root: &str, binding: &str) -> StorageClass {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "provisioner": provisioner,
        "parameters": {"plugin": plugin, "hostRoot": root},
        "reclaimPolicy": "Delete",
        "volumeBindingMode": binding,
        "allowVolumeExpansion": true,
    }))
    .unwrap()
}

/// A class like `base` under another name, with `root` as its plugin's
/// guest root when given (one the policy does not grant: every call fails).
fn class_like(base: &StorageClass, name: &str, root: Option<&str>) -> StorageClass {
    let mut c = base.clone();
    c.metadata = kube::api::ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    };
    if let Some(root) = root {
        c.parameters
            .as_mut()
            .unwrap()
            .insert("root".into(), root.into());
    }
    c
}

/// Runs the hosts of deploy/ (with or without the API source): two
/// replicas of the Deployment, with a backend added, and one pod of the
/// DaemonSet per node, through the scenario; fails on any call of either
/// side that its RBAC objects do not allow and on any rule it never used.
async fn the_host_calls_exactly_what_rbac_allows(server: Server, api_source: bool) {
    // One scenario at a time: four hosts compiling and provisioning at once
    // on a small machine only make the test slower to fail.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one = ONE_AT_A_TIME.lock().await;
    let (cluster, client) = TestApi::start(
        server,
        &NODES,
        simulator_config(),
        test_cluster::Options {
            audit: true,
            ..Default::default()
        },
    )
    .await;
    let objects = install(&cluster, &client, api_source).await;
    let ns = namespace();
    add_a_shared_backend(&client, api_source).await;

    // The Deployment as the user has it now, and the DaemonSet.
    let deployment: Deployment = Api::namespaced(client.clone(), &ns)
        .get("wasmprov")
        .await
        .unwrap();
    let central = Workload {
        kind: "Deployment".into(),
        name: "wasmprov".into(),
        pod: deployment.spec.unwrap().template.spec.unwrap(),
    };
    let node_hosts = workload(&objects, "DaemonSet");
    // Every node is this machine, as for a kubelet: the pods' hostPath
    // volumes are the real directories, which a host checks a volume's path
    // against (it refuses a hostPath it cannot see). Needs root. The node
    // hosts share the directory here; each still makes only its own node's
    // volumes.
    let node = Path::new("/");
    let scratch = tempfile::tempdir().unwrap();
    let mut pods = Vec::new();
    let mut hosts = Vec::new();
    let mut start =
        |w: &Workload, name: String, on: &str, kubeconfig: &Path, pod: Pod, extra: &[&str]| {
            // The policy's preopens name container paths: map them too.
            let policy = pod.local(&flag(&w.container(), "policy").unwrap()).unwrap();
            let mut text = std::fs::read_to_string(&policy).unwrap();
            for (mount, local) in &pod.mounts {
                text = text.replace(
                    &format!("host: {mount}"),
                    &format!("host: {}", local.display()),
                );
            }
            std::fs::write(&policy, text).unwrap();
            let cli = replica(w, &pod, &name, on, kubeconfig, extra);
            hosts.push(tokio::spawn(wasmprov::cli::run(cli)));
            pods.push(pod);
        };
    let kubeconfig = host_kubeconfig(&cluster, &central, scratch.path()).await;
    for name in ["wasmprov-7d4f-a", "wasmprov-7d4f-b"] {
        let pod = Pod::start(&client, &central, node).await;
        start(&central, name.into(), NODES[0], &kubeconfig, pod, &[]);
    }
    let kubeconfig = host_kubeconfig(&cluster, &node_hosts, scratch.path()).await;
    let mut node_pods = BTreeSet::new();
    for (i, on) in NODES.iter().enumerate() {
        let pod = Pod::start(&client, &node_hosts, node).await;
        let name = format!("wasmprov-node-{i}");
        node_pods.insert(name.clone());
        // Volumes of a gone node are reported after a second, not 30.
        start(
            &node_hosts,
            name,
            on,
            &kubeconfig,
            pod,
            &["--gone-node-grace=1s"],
        );
    }
    let volumes_dir = Path::new("/var/lib/wasmprov/hostpath");

    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let classes: Api<StorageClass> = Api::all(client.clone());
    let events: Api<Event> = Api::all(client.clone());
    let pp = PostParams::default();
    let bound = |name: &'static str| {
        let claims = claims.clone();
        let volumes = volumes.clone();
        async move {
            let pv = eventually(&format!("claim {name} is Bound"), || async {
                let c = claims.get(name).await.ok()?;
                (c.status?.phase? == "Bound").then_some(c.spec?.volume_name?)
            })
            .await;
            volumes.get(&pv).await.unwrap()
        }
    };
    let claim = |name: &str, class: &str| -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .unwrap()
    };
    // A pod of claim `name` is scheduled: on the real server the scheduler
    // picks a node for a pod; the simulator has none, so the test does.
    let scheduled = |name: &'static str, node: &'static str| {
        let (cluster, client, ns) = (&cluster, client.clone(), ns.clone());
        async move {
            match cluster {
                TestApi::Simulated(sim) => sim.schedule_claim(&ns, name, node).await.unwrap(),
                TestApi::Real(_) => support::create_pod(&client, &ns, name, name).await,
            }
        }
    };
    let selected_node = |name: &'static str| {
        let claims = claims.clone();
        async move {
            claims
                .get(name)
                .await
                .unwrap()
                .annotations()
                .get("volume.kubernetes.io/selected-node")
                .cloned()
                .unwrap()
        }
    };
    let pinned_to = |pv: &PersistentVolume, node: &str| {
        let affinity = serde_json::to_value(&pv.spec.as_ref().unwrap().node_affinity).unwrap();
        assert_eq!(
            affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
            json!([node]),
            "{} is pinned to {node}: {affinity}",
            pv.name_any()
        );
    };
    let warned = |reason: &'static str, regarding: String| {
        let events = events.clone();
        async move {
            eventually(&format!("a {reason} event on {regarding}"), || async {
                let list = events.list(&Default::default()).await.ok()?;
                list.items
                    .into_iter()
                    .find(|e| {
                        e.reason.as_deref() == Some(reason)
                            && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                                == Some(regarding.as_str())
                    })
                    .map(|_| ())
            })
            .await
        }
    };
    let repeated_failure = |claim: &'static str| {
        let events = events.clone();
        async move {
            eventually(
                &format!("a repeated ProvisioningFailed event of claim {claim}"),
                || async {
                    let list = events.list(&Default::default()).await.ok()?;
                    list.items
                        .into_iter()
                        .find(|e| {
                            e.reason.as_deref() == Some("ProvisioningFailed")
                                && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                                    == Some(claim)
                                && e.series.as_ref().is_some_and(|s| s.count >= 2)
                        })
                        .map(|_| ())
                },
            )
            .await
        }
    };
    let unselected = |name: &'static str| {
        let claims = claims.clone();
        async move {
            eventually(
                &format!("the gone node of {name} is unselected"),
                || async {
                    let c = claims.get(name).await.ok()?;
                    (!c.annotations()
                        .contains_key("volume.kubernetes.io/selected-node"))
                    .then_some(())
                },
            )
            .await
        }
    };
    let gone = json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "gone"}}});
    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    let holds_2gi = |name: &'static str| {
        let claims = claims.clone();
        async move {
            eventually(&format!("claim {name} holds 2Gi"), || async {
                let status = claims.get(name).await.ok()?.status?;
                (status.capacity?.get("storage")?.0 == "2Gi").then_some(())
            })
            .await
        }
    };
    let deleted = |pv: String| {
        let volumes = volumes.clone();
        async move {
            eventually(&format!("volume {pv} is deleted"), || async {
                volumes.get_opt(&pv).await.ok()?.is_none().then_some(())
            })
            .await
        }
    };

    // ---- The node hosts (hostpath, node.wasmprov.io)
    // Each holds its node's Lease; one of them is the janitor.
    for (i, on) in NODES.iter().enumerate() {
        let holder = eventually(
            &format!("the node host of {on} holds its Lease"),
            || async {
                leases
                    .get_opt(&format!("{NODE_PROVISIONER}.{on}"))
                    .await
                    .ok()??
                    .spec?
                    .holder_identity
            },
        )
        .await;
        assert_eq!(holder, format!("wasmprov-node-{i}"));
    }
    let janitor = eventually("a node host is the janitor", || async {
        leases
            .get_opt(&format!("{NODE_PROVISIONER}-janitor"))
            .await
            .ok()??
            .spec?
            .holder_identity
    })
    .await;
    assert!(node_pods.contains(&janitor), "{janitor}");

    // deploy/claim.yaml's claim, made on the node its pod was scheduled to.
    if matches!(cluster, TestApi::Simulated(_)) {
        scheduled("demo", NODES[0]).await;
    }
    let demo_pv = bound("demo").await;
    pinned_to(&demo_pv, &selected_node("demo").await);
    assert!(volumes_dir.join(demo_pv.name_any()).is_dir());
    let reloaded = if api_source {
        Some(new_version_through_the_api(&client, &node_hosts, &events, &node_pods).await)
    } else {
        None
    };
    // Retain, on the other node.
    claims
        .create(&pp, &claim("kept", "hostpath-retain"))
        .await
        .unwrap();
    scheduled("kept", NODES[1]).await;
    let kept_pv = bound("kept").await;
    pinned_to(&kept_pv, &selected_node("kept").await);
    if let Some(digest) = reloaded {
        assert_eq!(
            kept_pv.annotations().get("wasmprov.io/plugin-digest"),
            Some(&digest),
            "the new version provisions"
        );
    }
    // A selected node that is gone: the janitor asks for another one.
    claims
        .create(&pp, &claim("moved", "hostpath"))
        .await
        .unwrap();
    claims
        .patch("moved", &PatchParams::default(), &Patch::Merge(&gone))
        .await
        .unwrap();
    unselected("moved").await;
    // A claim of a class that does not exist yet is provisioned once it
    // does (the PV controller hands it over then; the class watch has it).
    claims.create(&pp, &claim("early", "late")).await.unwrap();
    let hostpath: StorageClass = objects
        .iter()
        .find(|o| o.kind() == "StorageClass" && o.name() == "hostpath")
        .unwrap()
        .typed();
    classes
        .create(&pp, &class_like(&hostpath, "late", None))
        .await
        .unwrap();
    scheduled("early", NODES[0]).await;
    bound("early").await;
    // A failing plugin call, retried: the same event again is a series.
    classes
        .create(&pp, &class_like(&hostpath, "broken", Some("/not-granted")))
        .await
        .unwrap();
    claims.create(&pp, &claim("fails", "broken")).await.unwrap();
    scheduled("fails", NODES[1]).await;
    repeated_failure("fails").await;
    // Growing a volume: the claim's status and the volume are patched.
    claims
        .patch("kept", &PatchParams::default(), &Patch::Merge(&grow))
        .await
        .unwrap();
    holds_2gi("kept").await;
    // A Released volume of a node that is gone: kept, and reported.
    let orphan: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pvc-of-a-gone-node",
                     "annotations": {"pv.kubernetes.io/provisioned-by": NODE_PROVISIONER}},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": "hostpath",
            "hostPath": {"path": "/var/lib/wasmprov/hostpath/pvc-of-a-gone-node"},
            "claimRef": {"namespace": ns, "name": "long-gone", "uid": "6a1c3f0e-0000-4000-8000-000000000000"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gone-node"]}]}]}},
        },
    }))
    .unwrap();
    volumes.create(&pp, &orphan).await.unwrap();
    warned("VolumeNodeGone", orphan.name_any()).await;
    assert!(volumes.get_opt(&orphan.name_any()).await.unwrap().is_some());
    // Reclaim (Delete): storage, volume and our finalizer go, once the demo
    // pod is (at once: on the real server no kubelet confirms its end).
    Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), &ns)
        .delete(
            "demo",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    claims
        .delete("demo", &DeleteParams::default())
        .await
        .unwrap();
    deleted(demo_pv.name_any()).await;
    assert!(!volumes_dir.join(demo_pv.name_any()).exists());
    // Each node host publishes its node's room for each class it serves,
    // for the scheduler, and takes it back with the class.
    let capacities: Api<CSIStorageCapacity> = Api::namespaced(client.clone(), &ns);
    let published_for = |class: &'static str| {
        let capacities = capacities.clone();
        async move {
            let all = capacities.list(&Default::default()).await.ok()?.items;
            let nodes: BTreeSet<String> = (all.iter())
                .filter(|c| c.storage_class_name == class && c.capacity.is_some())
                .filter_map(|c| {
                    let labels = c.node_topology.as_ref()?.match_labels.as_ref()?;
                    labels.get("kubernetes.io/hostname").cloned()
                })
                .collect();
            Some(nodes)
        }
    };
    let every_node: BTreeSet<String> = NODES.iter().map(|n| n.to_string()).collect();
    eventually(
        "each node host publishes its room for class broken",
        || async { (published_for("broken").await? == every_node).then_some(()) },
    )
    .await;
    classes
        .delete("broken", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the room published for a deleted class goes", || async {
        published_for("broken").await?.is_empty().then_some(())
    })
    .await;

    // ---- The central replicas (the added backend, wasmprov.io/host)
    let holder = eventually("a replica holds the leader Lease", || async {
        leases
            .get_opt("wasmprov.io-host")
            .await
            .ok()??
            .spec?
            .holder_identity
    })
    .await;
    assert!(holder.starts_with("wasmprov-7d4f-"), "{holder}");
    claims
        .create(&pp, &claim("shared-data", SHARED))
        .await
        .unwrap();
    let shared_pv = bound("shared-data").await;
    assert!(Path::new(SHARED_ROOT).join(shared_pv.name_any()).is_dir());
    assert!(
        shared_pv.spec.as_ref().unwrap().node_affinity.is_none(),
        "every node mounts the share"
    );
    // WaitForFirstConsumer: the selected node is read; a gone one cleared.
    let shared: StorageClass = classes.get(SHARED).await.unwrap();
    let mut wffc = class_like(&shared, "shared-wffc", None);
    wffc.volume_binding_mode = Some("WaitForFirstConsumer".into());
    classes.create(&pp, &wffc).await.unwrap();
    claims
        .create(&pp, &claim("shared-local", "shared-wffc"))
        .await
        .unwrap();
    scheduled("shared-local", NODES[1]).await;
    bound("shared-local").await;
    claims
        .create(&pp, &claim("shared-moved", "shared-wffc"))
        .await
        .unwrap();
    claims
        .patch(
            "shared-moved",
            &PatchParams::default(),
            &Patch::Merge(&gone),
        )
        .await
        .unwrap();
    unselected("shared-moved").await;
    classes
        .create(
            &pp,
            &class_like(&shared, "shared-broken", Some("/not-granted")),
        )
        .await
        .unwrap();
    claims
        .create(&pp, &claim("shared-fails", "shared-broken"))
        .await
        .unwrap();
    repeated_failure("shared-fails").await;
    claims
        .patch("shared-data", &PatchParams::default(), &Patch::Merge(&grow))
        .await
        .unwrap();
    holds_2gi("shared-data").await;
    claims
        .delete("shared-data", &DeleteParams::default())
        .await
        .unwrap();
    deleted(shared_pv.name_any()).await;
    assert!(!Path::new(SHARED_ROOT).join(shared_pv.name_any()).exists());

    // The Leases are renewed.
    for lease in [
        "wasmprov.io-host".to_owned(),
        format!("{NODE_PROVISIONER}.{}", NODES[0]),
        format!("{NODE_PROVISIONER}-janitor"),
    ] {
        eventually(&format!("Lease {lease} is renewed"), || async {
            let spec = leases.get_opt(&lease).await.ok()??.spec?;
            (spec.renew_time? != spec.acquire_time?).then_some(())
        })
        .await;
    }

    for h in &hosts {
        assert!(!h.is_finished(), "a host stopped: {h:?}");
        h.abort();
    }

    // Each side: every call it made is allowed; every rule was needed.
    for w in [&central, &node_hosts] {
        let sa = w.service_account();
        let grants = grants(&objects, &ns, &sa);
        let requests = host_requests(&cluster, &w.user());
        if let TestApi::Real(real) = &cluster {
            denied_outside_its_roles(real, &ns, &sa).await;
        }
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for r in &requests {
            let key = format!(
                "{} {}/{} ns={:?}",
                r.verb, r.api_group, r.resource, r.namespace
            );
            *seen.entry(key).or_default() += 1;
        }
        eprintln!("the requests of {} {}: {seen:#?}", w.kind, w.name);
        let rbac = match w.side() {
            RunsOn::Central => "deploy/rbac.yaml",
            RunsOn::Node => "deploy/rbac-node.yaml",
        };
        let also = if api_source {
            ", deploy/api-source/rbac.yaml"
        } else {
            ""
        };
        let missing: BTreeSet<String> = requests
            .iter()
            .filter(|r| !grants.iter().any(|g| g.allows(r)))
            .map(describe)
            .collect();
        assert!(
            missing.is_empty(),
            "the RBAC objects ({rbac}{also}) do not allow these calls of {} {}:\n{}",
            w.kind,
            w.name,
            missing.into_iter().collect::<Vec<_>>().join("\n")
        );
        let mut unused = Vec::new();
        for g in &grants {
            let used = requests.iter().any(|r| g.allows(r));
            let excused = UNEXERCISED.iter().any(|(group, resource, verb, _)| {
                g.group == *group && g.resource == *resource && g.verb == *verb
            });
            // An excused rule may still be used now and then (a race).
            if !used && !excused {
                unused.push(format!("{g:?}"));
            }
        }
        assert!(
            unused.is_empty(),
            "the RBAC objects ({rbac}{also}) grant {} {} what it never did (remove it, or exercise it):\n{}",
            w.kind,
            w.name,
            unused.join("\n")
        );
    }
}

/// The real RBAC authorizer refuses the host's ServiceAccount what its
/// roles do not grant: reading Secrets, deleting a StorageClass, making Pods.
async fn denied_outside_its_roles(cluster: &test_cluster::Cluster, ns: &str, sa: &str) {
    use k8s_openapi::api::core::v1::{Pod, Secret};
    let token = cluster.service_account_token(ns, sa).await.unwrap();
    let host = cluster.client_with_token(&token).await.unwrap();
    let forbidden = |what: &str, result: Result<(), kube::Error>| match result {
        Err(kube::Error::Api(e)) if e.code == 403 => {
            assert!(
                e.message
                    .contains(&format!("system:serviceaccount:{ns}:{sa}")),
                "{what}: {}",
                e.message
            );
        }
        other => panic!("{what}: expected 403 Forbidden, got {other:?}"),
    };
    forbidden(
        "list secrets",
        Api::<Secret>::all(host.clone())
            .list(&Default::default())
            .await
            .map(drop),
    );
    forbidden(
        "delete storageclass hostpath",
        Api::<StorageClass>::all(host.clone())
            .delete("hostpath", &DeleteParams::default())
            .await
            .map(drop),
    );
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "escape"},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/x"}]},
    }))
    .unwrap();
    forbidden(
        "create pod",
        Api::<Pod>::namespaced(host, ns)
            .create(&PostParams::default(), &pod)
            .await
            .map(drop),
    );
}

/// The API-source variant's reload: the node hosts (`pods` of `w`) serve
/// hostpath from its ConfigMap (a PluginLoaded event from each), then a new
/// version applied to that ConfigMap replaces it in all. Returns the new
/// version's digest.
async fn new_version_through_the_api(
    client: &Client,
    w: &Workload,
    events: &Api<Event>,
    pods: &BTreeSet<String>,
) -> String {
    let c = w.container();
    assert!(
        c.args.iter().flatten().any(|a| a == "--plugin-configmaps"),
        "{:?}",
        c.args
    );
    assert!(
        flag(&c, "plugins-dir").is_none(),
        "the API-source variant reads no directory"
    );
    let cm = package::config_map_name("hostpath");
    let wasm = std::fs::read(support::rust_plugin_path("hostpath")).unwrap();
    let v1 = support::digest(&wasm);
    plugin_loaded_everywhere(events, &cm, &format!("version {v1} serves"), pods).await;

    let v2_wasm = support::variant(&wasm, "deploy.rs: a new version");
    let v2 = support::digest(&v2_wasm);
    let packed = package::pack(
        "hostpath",
        &v2_wasm,
        Encoding::Zstd,
        None,
        package::DEFAULT_PART_SIZE,
    )
    .unwrap();
    assert_eq!(packed.config_maps.len(), 1);
    let params = PatchParams {
        field_manager: Some("kubectl".into()),
        field_validation: Some(ValidationDirective::Strict),
        ..PatchParams::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), &namespace())
        .patch(&cm, &params, &Patch::Apply(&packed.config_maps[0]))
        .await
        .unwrap();
    plugin_loaded_everywhere(
        events,
        &cm,
        &format!("version {v2} serves, replacing {v1}"),
        pods,
    )
    .await;
    v2
}

/// Waits for a PluginLoaded event on ConfigMap `cm` whose note contains
/// `text` from each of `pods`, and no other (the central hosts do not serve
/// a node plugin).
async fn plugin_loaded_everywhere(
    events: &Api<Event>,
    cm: &str,
    text: &str,
    pods: &BTreeSet<String>,
) {
    eventually(
        &format!("{pods:?} report PluginLoaded {text:?} on {cm}"),
        || async {
            let reporters: BTreeSet<String> = events
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|e| {
                    e.reason.as_deref() == Some(configmaps::PLUGIN_LOADED)
                        && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ConfigMap")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(cm)
                        && e.note.as_deref().is_some_and(|n| n.contains(text))
                })
                .filter_map(|e| e.reporting_instance)
                .collect();
            (reporters == *pods).then_some(())
        },
    )
    .await;
}
