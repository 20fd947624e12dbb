//! Conformance of the simulator as seen by the preinstalled kubectl
//! (get, get -w, create, apply, apply --server-side, patch, replace, delete, describe).

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

struct Kubectl {
    _dir: tempfile::TempDir,
    kubeconfig: std::path::PathBuf,
    sim: kube_sim::Simulator,
}

struct Output {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    async fn start() -> Kubectl {
        Self::start_with(kube_sim::Config::default()).await
    }

    async fn start_with(config: kube_sim::Config) -> Kubectl {
        let sim = start_with(config).await;
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, sim.kubeconfig()).unwrap();
        Kubectl {
            _dir: dir,
            kubeconfig,
            sim,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            // A private discovery cache: the port (and so the cache key) is reused across runs.
            .env("KUBECACHEDIR", self._dir.path().join("cache"))
            .env("HOME", self._dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Run kubectl with `stdin`, bounded to 30 s.
    async fn run_with(&self, args: &[&str], stdin: &str) -> Output {
        use tokio::io::AsyncWriteExt;
        let mut child = self
            .command(args)
            .spawn()
            .expect("kubectl on PATH (the preinstalled dispatcher)");
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.as_bytes()).await.unwrap();
        drop(input);
        let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish in 30 s"))
            .unwrap();
        Output {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    async fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, "").await
    }

    /// Run and require success; returns stdout.
    async fn ok(&self, args: &[&str]) -> String {
        self.ok_with(args, "").await
    }

    async fn ok_with(&self, args: &[&str], stdin: &str) -> String {
        let out = self.run_with(args, stdin).await;
        assert!(
            out.ok,
            "kubectl {args:?} failed:\n{}\n{}",
            out.stdout, out.stderr
        );
        out.stdout
    }
}

const CLASS: &str = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: wasm
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: wasmprov.io/host
parameters:
  plugin: hostpath
"#;

const CLAIM: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
"#;

#[tokio::test]
async fn create_and_get_print_real_columns() {
    let k = Kubectl::start().await;
    let out = k
        .ok_with(&["create", "-f", "-"], &format!("{CLASS}\n---\n{CLAIM}"))
        .await;
    assert!(
        out.contains("storageclass.storage.k8s.io/wasm created"),
        "{out}"
    );
    assert!(out.contains("persistentvolumeclaim/data created"), "{out}");

    let out = k.ok(&["get", "pvc"]).await;
    let header = out.lines().next().unwrap_or("");
    for col in [
        "NAME",
        "STATUS",
        "VOLUME",
        "CAPACITY",
        "ACCESS MODES",
        "STORAGECLASS",
        "AGE",
    ] {
        assert!(header.contains(col), "missing {col} in {header}");
    }
    assert!(
        out.contains("data") && out.contains("Pending") && out.contains("wasm"),
        "{out}"
    );
    let out = k.ok(&["get", "sc"]).await;
    assert!(
        out.contains("wasm (default)")
            && out.contains("wasmprov.io/host")
            && out.contains("Immediate"),
        "{out}"
    );
    // `get all` expands the `all` category from discovery.
    k.ok(&["get", "all"]).await;
    let out = k.ok(&["get", "nodes"]).await;
    assert!(
        out.contains("kube-sim-node") && out.contains("Ready"),
        "{out}"
    );

    // Creating it again: AlreadyExists.
    let out = k.run_with(&["create", "-f", "-"], CLAIM).await;
    assert!(
        !out.ok && out.stderr.contains("AlreadyExists"),
        "{}",
        out.stderr
    );

    // Validation is on (no --validate=false) and the server rejects unknown fields.
    let bad = CLAIM
        .replace("  accessModes:", "  bogusField: 1\n  accessModes:")
        .replace("name: data", "name: bad");
    let out = k.run_with(&["create", "-f", "-"], &bad).await;
    assert!(
        !out.ok && out.stderr.contains("unknown field"),
        "{}",
        out.stderr
    );

    let out = k
        .ok(&[
            "get",
            "pvc",
            "data",
            "-o",
            "jsonpath={.metadata.annotations.volume\\.kubernetes\\.io/storage-provisioner}",
        ])
        .await;
    assert_eq!(out, "wasmprov.io/host");
}

#[tokio::test]
async fn apply_client_side_and_server_side() {
    let k = Kubectl::start().await;
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: \"1\"\n";
    assert!(k
        .ok_with(&["apply", "-f", "-"], cm)
        .await
        .contains("configmap/settings created"));
    assert!(k
        .ok_with(&["apply", "-f", "-"], cm)
        .await
        .contains("configmap/settings unchanged"));
    let changed = cm.replace("a: \"1\"", "a: \"2\"\n  b: \"3\"");
    assert!(k
        .ok_with(&["apply", "-f", "-"], &changed)
        .await
        .contains("configmap/settings configured"));
    // Dropping `b` from the applied config removes it (three-way merge).
    assert!(k
        .ok_with(&["apply", "-f", "-"], &cm.replace("\"1\"", "\"2\""))
        .await
        .contains("configured"));
    assert_eq!(
        k.ok(&["get", "cm", "settings", "-o", "jsonpath={.data}"])
            .await,
        r#"{"a":"2"}"#
    );

    let ssa = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  x: \"1\"\n";
    assert!(k
        .ok_with(&["apply", "--server-side", "-f", "-"], ssa)
        .await
        .contains("serverside-applied"));
    let again = ssa.replace("\"1\"", "\"2\"");
    assert!(k
        .ok_with(&["apply", "--server-side", "-f", "-"], &again)
        .await
        .contains("serverside-applied"));
    // Another manager changing the same field conflicts unless forced.
    let out = k
        .run_with(
            &[
                "apply",
                "--server-side",
                "--field-manager",
                "other",
                "-f",
                "-",
            ],
            ssa,
        )
        .await;
    assert!(!out.ok && out.stderr.contains("conflict"), "{}", out.stderr);
    let out = k
        .ok_with(
            &[
                "apply",
                "--server-side",
                "--field-manager",
                "other",
                "--force-conflicts",
                "-f",
                "-",
            ],
            ssa,
        )
        .await;
    assert!(out.contains("serverside-applied"), "{out}");
    assert_eq!(
        k.ok(&["get", "cm", "ssa", "-o", "jsonpath={.data.x}"])
            .await,
        "1"
    );
}

#[tokio::test]
async fn patch_replace_and_delete() {
    let k = Kubectl::start().await;
    k.ok_with(&["create", "-f", "-"], &format!("{CLASS}\n---\n{CLAIM}"))
        .await;
    k.ok(&[
        "patch",
        "pvc",
        "data",
        "--type",
        "merge",
        "-p",
        r#"{"metadata":{"labels":{"tier":"gold"}}}"#,
    ])
    .await;
    k.ok(&[
        "patch",
        "pvc",
        "data",
        "-p",
        r#"{"metadata":{"finalizers":["example.com/x"]}}"#,
    ])
    .await;
    let fin = k
        .ok(&[
            "get",
            "pvc",
            "data",
            "-o",
            "jsonpath={.metadata.finalizers}",
        ])
        .await;
    assert_eq!(
        fin, r#"["kubernetes.io/pvc-protection","example.com/x"]"#,
        "strategic merge keeps the set"
    );
    let out = k
        .run(&[
            "patch",
            "pvc",
            "data",
            "--type",
            "json",
            "-p",
            r#"[{"op":"test","path":"/metadata/labels/tier","value":"silver"}]"#,
        ])
        .await;
    assert!(!out.ok, "a failed JSON patch test must fail");
    k.ok(&[
        "patch",
        "pvc",
        "data",
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers/1"}]"#,
    ])
    .await;

    // replace with the current object succeeds; the server keeps status.
    let current = k.ok(&["get", "pvc", "data", "-o", "yaml"]).await;
    let replaced = current.replace("tier: gold", "tier: platinum");
    assert!(k
        .ok_with(&["replace", "-f", "-"], &replaced)
        .await
        .contains("replaced"));
    assert_eq!(
        k.ok(&[
            "get",
            "pvc",
            "data",
            "-o",
            "jsonpath={.metadata.labels.tier}"
        ])
        .await,
        "platinum"
    );
    // ...and a stale copy conflicts.
    let out = k.run_with(&["replace", "-f", "-"], &current).await;
    assert!(!out.ok && out.stderr.contains("Conflict"), "{}", out.stderr);

    // delete waits until the pvc-protection finalizer is lifted by the controller.
    let out = k.ok(&["delete", "pvc", "data"]).await;
    assert!(
        out.contains("persistentvolumeclaim \"data\" deleted"),
        "{out}"
    );
    let out = k.run(&["get", "pvc", "data"]).await;
    assert!(!out.ok && out.stderr.contains("NotFound"), "{}", out.stderr);
}

async fn next_line(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) -> String {
    tokio::time::timeout(Duration::from_secs(15), lines.next_line())
        .await
        .expect("kubectl get -w printed in time")
        .unwrap()
        .expect("kubectl get -w still running")
}

#[tokio::test]
async fn get_watch_streams_changes() {
    let k = Kubectl::start().await;
    k.ok_with(&["create", "-f", "-"], CLAIM).await;
    let mut child = k
        .command(&["get", "pvc", "-w", "--output-watch-events"])
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        next_line(&mut lines).await.contains("EVENT"),
        "header first"
    );
    assert!(next_line(&mut lines).await.contains("ADDED"));
    let client = k.sim.client().unwrap();
    let pvcs: kube::Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        kube::Api::namespaced(client, "default");
    pvcs.create(&Default::default(), &pvc("second", Some("none"), "1Gi"))
        .await
        .unwrap();
    loop {
        let line = next_line(&mut lines).await;
        if line.contains("second") {
            assert!(line.starts_with("ADDED"), "{line}");
            break;
        }
    }
    child.kill().await.unwrap();
}

#[tokio::test]
async fn describe_shows_events_and_binding() {
    let k = Kubectl::start().await;
    k.ok_with(&["create", "-f", "-"], &format!("{CLASS}\n---\n{CLAIM}"))
        .await;
    let out = eventually("describe shows the ExternalProvisioning event", || {
        let k = &k;
        async move {
            let out = k.ok(&["describe", "pvc", "data"]).await;
            out.contains("ExternalProvisioning").then_some(out)
        }
    })
    .await;
    assert!(out.contains("persistentvolume-controller"), "{out}");
    assert!(out.contains("kubernetes.io/pvc-protection"), "{out}");
    let uid = k
        .ok(&["get", "pvc", "data", "-o", "jsonpath={.metadata.uid}"])
        .await;
    let pv = format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata:\n  name: pv-data\nspec:\n  capacity: {{storage: 1Gi}}\n  accessModes: [ReadWriteOnce]\n  storageClassName: wasm\n  hostPath: {{path: /tmp/pv-data}}\n  claimRef: {{namespace: default, name: data, uid: {uid}}}\n"
    );
    k.ok_with(&["create", "-f", "-"], &pv).await;
    eventually("kubectl get shows the claim Bound", || {
        let k = &k;
        async move {
            let out = k.ok(&["get", "pvc", "data"]).await;
            (out.contains("Bound") && out.contains("pv-data") && out.contains("RWO")).then_some(())
        }
    })
    .await;
    let out = k.ok(&["describe", "pv", "pv-data"]).await;
    assert!(
        out.contains("Status:") && out.contains("Bound") && out.contains("default/data"),
        "{out}"
    );
}

#[tokio::test]
async fn standalone_binary_serves_kubectl_with_just_a_server_flag() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kube-sim"))
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("kube-sim prints its URL")
        .unwrap()
        .unwrap();
    let url = first.rsplit(' ').next().unwrap().to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{first}");
    let hint = lines.next_line().await.unwrap().unwrap();
    assert!(hint.contains("kubectl --server"), "{hint}");

    let home = tempfile::tempdir().unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        Command::new("kubectl")
            .args(["--server", &url, "get", "namespaces"])
            .env("HOME", home.path())
            .env("KUBECONFIG", home.path().join("none"))
            .output(),
    )
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("kube-system"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    child.kill().await.unwrap();
}

#[tokio::test]
async fn older_kubectl_versions_work_too() {
    // The dispatcher runs the kubectl matching the server's minor version;
    // 1.27 and 1.28 check field-validation support in the protobuf /openapi/v2.
    for minor in [27, 28, 29, 31] {
        let k = Kubectl::start_with(kube_sim::Config {
            minor_version: minor,
            ..kube_sim::Config::default()
        })
        .await;
        let version = k.ok(&["version"]).await;
        let client_line = version.lines().next().unwrap_or("");
        assert!(client_line.contains(&format!("v1.{minor}.")), "{version}");
        k.ok_with(&["apply", "-f", "-"], &format!("{CLASS}\n---\n{CLAIM}"))
            .await;
        let out = k.ok(&["get", "pvc"]).await;
        assert!(
            out.contains("data") && out.contains("Pending"),
            "kubectl 1.{minor}: {out}"
        );
        let out = k.ok(&["get", "leases", "-n", "kube-system"]).await;
        assert!(out.is_empty(), "kubectl 1.{minor}: {out}");
    }
}

#[tokio::test]
async fn create_namespace_and_configmap_from_file_use_protobuf() {
    // kubectl's generators send protobuf bodies; operators deliver plugins this way.
    let k = Kubectl::start().await;
    assert!(k
        .ok(&["create", "namespace", "plugins"])
        .await
        .contains("namespace/plugins created"));
    let dir = tempfile::tempdir().unwrap();
    let wasm: Vec<u8> = (0..50_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let path = dir.path().join("hostpath.wasm");
    std::fs::write(&path, &wasm).unwrap();
    let from_file = format!("--from-file={}", path.display());
    let out = k
        .ok(&[
            "-n",
            "plugins",
            "create",
            "configmap",
            "hostpath",
            &from_file,
            "--from-literal=plugin=hostpath",
        ])
        .await;
    assert!(out.contains("configmap/hostpath created"), "{out}");

    let client = k.sim.client().unwrap();
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client, "plugins");
    let cm = cms.get("hostpath").await.unwrap();
    assert_eq!(cm.binary_data.unwrap()["hostpath.wasm"].0, wasm);
    assert_eq!(cm.data.unwrap()["plugin"], "hostpath");

    // Over 1 MiB: refused by the server, as on a real cluster.
    let big = dir.path().join("big.wasm");
    std::fs::write(&big, vec![1u8; 1024 * 1024 + 1]).unwrap();
    let out = k
        .run(&[
            "-n",
            "plugins",
            "create",
            "configmap",
            "big",
            &format!("--from-file={}", big.display()),
        ])
        .await;
    assert!(!out.ok && out.stderr.contains("Too long"), "{}", out.stderr);
}
