//! `wasmprov dev` as a new user runs it: the built binary, its console, and
//! the kubectl lines it prints pasted into a shell.

mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::*;

/// How long anything the console should show may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(60);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The README's main command: the whole system on the simulated cluster.
#[test]
fn dev_binds_the_sample_claims_on_the_simulated_cluster() {
    plugin_path("hostpath"); // built by the test harness like everything else
    let data = tempfile::tempdir().unwrap();
    let out = wasmprov_command()
        .args(["dev", "--exit-when-bound", "--data-dir"])
        .arg(data.path())
        .output()
        .expect("run wasmprov");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for want in [
        "simulated API server at http://127.0.0.1:",
        "export KUBECONFIG=",
        "claim default/data: Bound to pvc-",
        "claim default/cache: Bound to pvc-",
        "all sample claims are Bound",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
    let volumes = std::fs::read_dir(data.path().join("hostpath"))
        .unwrap()
        .count();
    assert_eq!(volumes, 2, "one directory per sample claim");
}

/// A running `wasmprov dev` whose console is collected as it prints; killed
/// (this process only) when dropped.
struct Dev {
    child: Child,
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

impl Dev {
    fn start(data_dir: &Path) -> Self {
        let mut child = wasmprov_command()
            .args(["dev", "--data-dir"])
            .arg(data_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start wasmprov dev");
        let collect = |mut from: Box<dyn Read + Send>| {
            let text = Arc::new(Mutex::new(String::new()));
            let into = text.clone();
            std::thread::spawn(move || {
                let mut buf = [0; 4096];
                while let Ok(n @ 1..) = from.read(&mut buf) {
                    into.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
            text
        };
        let stdout = collect(Box::new(child.stdout.take().unwrap()));
        let stderr = collect(Box::new(child.stderr.take().unwrap()));
        Self {
            child,
            stdout,
            stderr,
        }
    }

    fn console(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// The first console line starting with `prefix`, waiting for it.
    fn line(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let console = self.console();
            if let Some(line) = console.lines().find(|l| l.starts_with(prefix)) {
                return line.to_owned();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "wasmprov dev exited ({status}) before printing {prefix:?}:\n{console}\n{}",
                    self.stderr.lock().unwrap()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no line {prefix:?} after {PATIENCE:?}:\n{console}\n{}",
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The kubectl lines dev printed, as a user copies them.
struct Printed {
    export: String,
    create: String,
    get: String,
    grow: String,
    delete: String,
}

impl Printed {
    fn parse(console: &str) -> Self {
        let lines: Vec<&str> = console.lines().collect();
        let find = |prefix: &str| {
            lines
                .iter()
                .position(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{console}"))
        };
        let (create, eof) = (find("kubectl create -f - <<EOF"), find("EOF"));
        assert!(
            create < eof,
            "the heredoc ends before it starts:\n{console}"
        );
        Self {
            export: lines[find("export KUBECONFIG=")].to_owned(),
            create: lines[create..=eof].join("\n"),
            get: lines[find("kubectl get ")].to_owned(),
            grow: lines[find("kubectl patch pvc ")].to_owned(),
            delete: lines[find("kubectl delete pvc ")].to_owned(),
        }
    }
}

/// Runs `lines` after the printed `export` line in a new bash, in a
/// directory that is not the checkout and with no KUBECONFIG of the test's
/// environment; fails the test unless they succeed without warnings.
fn paste(printed: &Printed, lines: &str) -> String {
    let elsewhere = tempfile::tempdir().unwrap();
    let out: Output = Command::new("bash")
        .arg("-c")
        .arg(format!("set -e\n{}\n{lines}\n", printed.export))
        .current_dir(elsewhere.path())
        .env_remove("KUBECONFIG")
        .output()
        .expect("run bash");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "pasting\n{lines}\nfailed or warned:\n{stdout}\n{stderr}"
    );
    stdout
}

/// The directory in a `…: Bound to pvc-… (directory DIR)` line.
fn directory(bound_line: &str) -> PathBuf {
    let (_, rest) = bound_line
        .split_once("(directory ")
        .unwrap_or_else(|| panic!("no directory in {bound_line:?}"));
    PathBuf::from(rest.trim_end_matches(')'))
}

/// A new user's session: paste the printed lines to create, list and delete
/// a claim; see why a claim of a class with a mistyped plugin stays Pending,
/// once, however often the host retries; see the deleted claim's volume and
/// directory go.
#[test]
fn dev_console_explains_claims_and_its_kubectl_lines_work() {
    plugin_path("hostpath");
    let data = tempfile::tempdir().unwrap();
    let mut dev = Dev::start(data.path());
    dev.line("claim default/data: Bound to pvc-");
    let printed = Printed::parse(&dev.console());

    // Create.
    let created = paste(&printed, &printed.create);
    assert!(
        created.contains("persistentvolumeclaim/mine created"),
        "{created}"
    );
    let bound = dev.line("claim default/mine: Bound to pvc-");
    let dir = directory(&bound);
    assert!(dir.is_dir(), "{bound}: no directory {}", dir.display());

    // List.
    let listed = paste(&printed, &printed.get);
    for want in [
        "persistentvolumeclaim/mine",
        "Bound",
        "persistentvolume/pvc-",
    ] {
        assert!(listed.contains(want), "missing {want:?} in:\n{listed}");
    }

    // Grow: the hostpath plugin resizes it, and the console says so.
    let patched = paste(&printed, &printed.grow);
    assert!(
        patched.contains("persistentvolumeclaim/mine patched"),
        "{patched}"
    );
    dev.line("claim default/mine: grown to 2Gi (was 1Gi)");

    // A class whose plugin is mistyped: the console says why its claim waits.
    paste(
        &printed,
        "kubectl create -f - <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: typo
provisioner: wasmprov.io/host
parameters:
  plugin: hostpth
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: ty
spec:
  storageClassName: typo
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
EOF",
    );
    let failed = dev.line("claim default/ty: ProvisioningFailed: ");
    assert!(
        failed.contains(r#"no plugin named "hostpth" is loaded"#) && failed.contains("hostpath"),
        "{failed}"
    );
    // Make the host retry until its event is a series of the same note.
    let deadline = Instant::now() + PATIENCE;
    for attempt in 1.. {
        paste(
            &printed,
            &format!("kubectl annotate --overwrite pvc ty wasmprov.io/retry={attempt}"),
        );
        std::thread::sleep(Duration::from_millis(500));
        let count = paste(
            &printed,
            r#"kubectl get events.events.k8s.io -o jsonpath='{range .items[?(@.reason=="ProvisioningFailed")]}{.series.count}{"\n"}{end}'"#,
        );
        if count
            .lines()
            .any(|c| c.trim().parse::<u32>().is_ok_and(|n| n >= 2))
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the ProvisioningFailed event never repeated:\n{}",
            dev.console()
        );
    }

    // Delete.
    let deleted = paste(&printed, &printed.delete);
    assert!(deleted.contains("\"mine\" deleted"), "{deleted}");
    let deleting = dev.line("claim default/mine: deleted");
    assert!(
        deleting.contains("removing its volume pvc-")
            && deleting.ends_with(&format!("directory {}", dir.display())),
        "{deleting}"
    );
    let removed = dev.line("claim default/mine: volume pvc-");
    assert!(
        removed.ends_with(&format!("and directory {} removed", dir.display())),
        "{removed}"
    );
    assert!(!dir.exists(), "{removed}, yet {} exists", dir.display());

    let console = dev.console();
    let failures = console
        .lines()
        .filter(|l| l.starts_with("claim default/ty: ProvisioningFailed: "))
        .count();
    assert_eq!(failures, 1, "one line per distinct note:\n{console}");
}
