//! A real Kubernetes control plane on loopback, for end-to-end tests and
//! benchmarks: etcd, kube-apiserver, kube-controller-manager (PV binder,
//! PV/PVC protection, garbage collector, namespaces) and kube-scheduler,
//! built from source by `tests/cluster/build.sh` and started here.
//!
//! ```no_run
//! let cluster = test_cluster::Cluster::start(test_cluster::Options::default())?;
//! println!("export KUBECONFIG={}", cluster.kubeconfig_path().display());
//! # Ok::<(), test_cluster::Error>(())
//! ```
//!
//! Authentication is by bearer token (an admin token in `system:masters`,
//! and real service-account tokens from the TokenRequest API, signed with a
//! key generated per cluster); authorization is RBAC, as on a real cluster.
//! Every process dies with the test process, even on a panic or a SIGKILL.

mod node;
mod pki;
mod process;

pub use node::{node_name, NodeOptions, NODE_NAME};

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use process::Component;

/// What can go wrong starting a cluster. Each names the component, its log
/// file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("building the control plane failed (tests/cluster/build.sh):\n{0}")]
    Build(String),
    #[error("starting {component} ({binary}): {source}")]
    Spawn {
        component: &'static str,
        binary: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{component} exited ({status}) before it was ready; its log is {log}, ending:\n{tail}"
    )]
    Exited {
        component: &'static str,
        status: String,
        log: PathBuf,
        tail: String,
    },
    #[error(
        "{component} was not ready after {waited:?} ({what}); its log is {log}, ending:\n{tail}"
    )]
    NotReady {
        component: &'static str,
        waited: Duration,
        what: String,
        log: PathBuf,
        tail: String,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what}: {message}")]
    Client { what: String, message: String },
    #[error("generating the test cluster's {what}: {message}")]
    Keys { what: String, message: String },
}

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct Options {
    /// Directory holding `etcd`, `kube-apiserver`, `kube-controller-manager`
    /// and `kube-scheduler`. `None`: `$WASMPROV_K8S_BIN` if set, else what
    /// `tests/cluster/build.sh` builds (cached under `target/k8s/`).
    pub bin_dir: Option<PathBuf>,
    /// Where the cluster keeps its data, keys and logs. `None`: a fresh
    /// directory under `target/test-clusters/`, removed when the cluster
    /// stops (and by the next start if this process died first).
    pub dir: Option<PathBuf>,
    /// The scheduler's VolumeBinding bind timeout: how long a pod waits for
    /// its WaitForFirstConsumer claims to bind before it is rescheduled
    /// (Kubernetes' default is 600 s; a test wants a failure sooner).
    pub bind_timeout: Duration,
    /// The longest a component may take to become ready.
    pub ready_timeout: Duration,
    /// Have the API server log every resource request (who, verb, object,
    /// answer) for [`Cluster::audit_events`]: the ground truth of what a
    /// client did, e.g. to check its RBAC rules. Off by default: it writes a
    /// line per request.
    pub audit: bool,
    /// With [`Options::audit`]: log only requests from users in these groups
    /// (e.g. `system:serviceaccounts`). Empty: every request. A benchmark
    /// narrows it so the API server's audit work for the controllers and
    /// the benchmark's own client is not part of what it measures.
    pub audit_groups: Vec<String>,
    /// The controller manager's API rate limit (QPS; burst is twice it).
    /// `None`: its default, 20 QPS, about five claims bound per second,
    /// which a benchmark of provisioners would measure instead of them.
    pub controller_manager_qps: Option<u32>,
    /// Real nodes (containerd, kubelet, kube-proxy each) that run pods: see
    /// [`NodeOptions`]. `None`: no node; pods stay Pending.
    pub node: Option<NodeOptions>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            bin_dir: None,
            dir: None,
            bind_timeout: Duration::from_secs(30),
            ready_timeout: Duration::from_secs(120),
            audit: false,
            audit_groups: Vec::new(),
            controller_manager_qps: None,
            node: None,
        }
    }
}

/// The crate's directory: `tests/cluster`.
fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's `target/` (or `$CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate_dir().join("../../target"))
}

/// The control-plane binaries: `$WASMPROV_K8S_BIN`, or built (once, then
/// cached by version) by `tests/cluster/build.sh`.
pub fn binaries() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os("WASMPROV_K8S_BIN") {
        return Ok(PathBuf::from(dir));
    }
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = std::process::Command::new("bash")
                .arg(crate_dir().join("build.sh"))
                .output()
                .map_err(|e| format!("cannot run bash: {e}"))?;
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            if !out.status.success() {
                return Err(stderr);
            }
            let dir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            Ok(PathBuf::from(dir))
        })
        .clone()
        .map_err(Error::Build)
}

/// The user name of [`Cluster::admin_token`] (in group `system:masters`).
pub const ADMIN_TOKEN_USER: &str = "admin";

/// A running control plane. Dropping it stops every process and removes
/// its directory (unless [`Options::dir`] was given).
pub struct Cluster {
    url: String,
    bin: PathBuf,
    dir: PathBuf,
    kubeconfig: PathBuf,
    ca: PathBuf,
    admin_token: String,
    components: Mutex<Vec<Component>>,
    remove_dir: bool,
    started_in: Duration,
    audit: bool,
    /// The real nodes, in order (most clusters have none).
    nodes: Mutex<Vec<node::Node>>,
}

/// One resource request from the API server's audit log, in the terms RBAC
/// uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    /// The authenticated user, e.g. `system:serviceaccount:NS:NAME`.
    pub user: String,
    /// get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    /// `""` for the core group.
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    /// `""` for cluster-scoped objects and requests across namespaces.
    pub namespace: String,
    /// `""` for collection requests.
    pub name: String,
    /// The HTTP status of the answer.
    pub code: u16,
}

impl AuditEvent {
    /// A resource request that was answered (a long-running one such as a
    /// watch as soon as its answer starts); None for non-resource requests
    /// such as discovery.
    fn from_json(e: &serde_json::Value) -> Option<AuditEvent> {
        if e["stage"] != "ResponseComplete" && e["stage"] != "ResponseStarted" {
            return None;
        }
        let object = e.get("objectRef")?;
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        Some(AuditEvent {
            user: text(&e["user"]["username"]),
            verb: text(&e["verb"]),
            api_group: text(&object["apiGroup"]),
            resource: text(&object["resource"]),
            subresource: text(&object["subresource"]),
            namespace: text(&object["namespace"]),
            name: text(&object["name"]),
            code: e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
        })
    }
}

impl Cluster {
    /// Starts etcd, kube-apiserver, kube-controller-manager and
    /// kube-scheduler, and returns once all four are ready. Blocks (use
    /// `spawn_blocking` in async code that must not stall). A port taken
    /// meanwhile by someone else is retried on another.
    pub fn start(options: Options) -> Result<Cluster, Error> {
        let t0 = Instant::now();
        let bin = match &options.bin_dir {
            Some(dir) => dir.clone(),
            None => binaries()?,
        };
        let (dir, remove_dir) = match &options.dir {
            Some(dir) => {
                // What an earlier cluster here left if its process was
                // killed: its containers, shims and mounts.
                node::sweep(dir);
                (dir.clone(), false)
            }
            None => (fresh_run_dir()?, true),
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            match start_in(&bin, &dir, &options) {
                Ok(mut cluster) => {
                    cluster.remove_dir = remove_dir;
                    cluster.audit = options.audit;
                    cluster.started_in = t0.elapsed();
                    return Ok(cluster);
                }
                Err(e) if attempt < 3 && port_in_use(&e) => continue,
                Err(e) => {
                    if remove_dir {
                        // Keep the logs the error points at.
                        eprintln!("test-cluster: logs kept in {}", dir.display());
                    }
                    return Err(e);
                }
            }
        }
    }

    /// `https://127.0.0.1:PORT`
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A kubeconfig file for the admin (what `kubectl` and `wasmprov run
    /// --kubeconfig` take).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The admin's bearer token.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The CA that signed the API server's serving certificate.
    pub fn ca_path(&self) -> &Path {
        &self.ca
    }

    /// The cluster's data, keys and logs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How long [`Cluster::start`] took.
    pub fn started_in(&self) -> Duration {
        self.started_in
    }

    /// A component's log file: `etcd`, `kube-apiserver`,
    /// `kube-controller-manager`, `kube-scheduler`, and with a node
    /// `containerd`, `kubelet` and `kube-proxy`.
    pub fn log_path(&self, component: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{component}.log"))
    }

    /// `kubectl --kubeconfig KUBECONFIG` of the same release as the server
    /// (from the bin directory when it has one, else from PATH).
    pub fn kubectl(&self) -> std::process::Command {
        let built = self.bin.join("kubectl");
        let mut command = std::process::Command::new(if built.exists() {
            built
        } else {
            PathBuf::from("kubectl")
        });
        command.arg("--kubeconfig").arg(&self.kubeconfig);
        command
    }

    /// `ctr` talking to the first node's containerd in the kubelet's
    /// namespace (`k8s.io`), e.g. `tasks kill -s SIGKILL ID` to kill a
    /// container as its process dying would. Panics without a node.
    pub fn ctr(&self) -> std::process::Command {
        self.ctr_on(NODE_NAME)
    }

    /// [`Cluster::ctr`] on node `name`.
    pub fn ctr_on(&self, name: &str) -> std::process::Command {
        self.with_node(name, |n| n.ctr_command())
    }

    /// Loads an OCI image tarball into every node (what `ctr images
    /// import` does), named by its index's annotations. Panics without a
    /// node.
    pub fn load_image(&self, tarball: &Path) -> Result<(), Error> {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        assert!(
            !nodes.is_empty(),
            "this cluster was started without a node (Options::node)"
        );
        nodes.iter().try_for_each(|n| n.load_image(tarball))
    }

    /// `program` run as node `name`'s processes see the filesystem (in its
    /// mount namespace: below its private paths, its own directories).
    /// Panics without such a node.
    pub fn command_on(&self, name: &str, program: &str) -> std::process::Command {
        self.with_node(name, |n| n.command(program))
    }

    /// Lets every node's containerd pull from registry `host`
    /// (`address:port`) over plain HTTP, as a lab registry without TLS is
    /// configured (containerd's hosts.toml). Panics without a node.
    pub fn trust_plain_http_registry(&self, host: &str) -> Result<(), Error> {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        assert!(!nodes.is_empty(), "this cluster was started without a node");
        nodes
            .iter()
            .try_for_each(|n| n.trust_plain_http_registry(host))
    }

    /// An address of this machine that every node's processes reach (node
    /// `name`'s end of its link to this machine; the others route to it
    /// through theirs). Panics without such a node.
    pub fn machine_address(&self, name: &str) -> std::net::Ipv4Addr {
        self.with_node(name, |n| n.machine_address())
    }

    /// The names of the real nodes, in order.
    pub fn node_names(&self) -> Vec<String> {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// Where this machine has what node `name`'s processes (its kubelet,
    /// its pods' hostPath volumes) see at `path`: the node's own directory
    /// below its private paths ([`NodeOptions::private_paths`]), `path`
    /// itself otherwise. Made with the node, removed with the cluster.
    pub fn node_view(&self, name: &str, path: &Path) -> PathBuf {
        self.with_node(name, |n| n.view(path))
    }

    /// Freezes node `name` as a machine that hangs: its kubelet,
    /// kube-proxy, containerd and containers stop running (SIGSTOP) but
    /// hold what they hold; the API server hears nothing more from it.
    /// Panics without such a node.
    pub fn freeze_node(&self, name: &str) {
        self.with_node(name, |n| n.freeze())
    }

    /// Stops node `name` as a machine that is switched off: its kubelet,
    /// kube-proxy, containers and containerd die, and its Node object stays
    /// (delete it to say the node is gone for good). What it kept below its
    /// private paths stays readable through [`Cluster::node_view`]. Panics
    /// without such a node.
    pub fn stop_node(&self, name: &str) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes
            .iter_mut()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("this cluster has no node {name} (Options::node)"))
            .stop();
    }

    fn with_node<T>(&self, name: &str, f: impl FnOnce(&node::Node) -> T) -> T {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        f(nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("this cluster has no node {name} (Options::node)")))
    }

    /// A kubeconfig (YAML) whose user sends `token`.
    pub fn kubeconfig_with_token(&self, token: &str) -> String {
        kubeconfig_yaml(&self.url, &self.ca, token)
    }

    /// An admin kube client. Make one per async runtime: a client's
    /// connections belong to the runtime that opened them.
    pub async fn client(&self) -> Result<kube::Client, Error> {
        client_for(&self.kubeconfig_with_token(&self.admin_token)).await
    }

    /// A client that sends `token`: e.g. a service account's, from
    /// [`Cluster::service_account_token`].
    pub async fn client_with_token(&self, token: &str) -> Result<kube::Client, Error> {
        client_for(&self.kubeconfig_with_token(token)).await
    }

    /// A real token for a service account, from the TokenRequest API (what
    /// kubelet mounts into a pod; `kubectl create token` does the same).
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, Error> {
        use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
        use k8s_openapi::api::core::v1::ServiceAccount;
        let client = self.client().await?;
        let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(client, namespace);
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![],
                expiration_seconds: Some(3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = accounts
            .create_token_request(name, &Default::default(), &request)
            .await
            .map_err(|e| Error::Client {
                what: format!("TokenRequest for service account {namespace}/{name}"),
                message: e.to_string(),
            })?;
        answer.status.map(|s| s.token).ok_or_else(|| Error::Client {
            what: format!("TokenRequest for service account {namespace}/{name}"),
            message: "the answer has no status.token".into(),
        })
    }

    /// Every resource request the API server has answered so far, in order
    /// ([`Options::audit`] must be on; panics otherwise, as an empty list
    /// would pass any check).
    pub fn audit_events(&self) -> Vec<AuditEvent> {
        let path = self.dir.join("audit.log");
        assert!(
            self.audit,
            "test_cluster::Options::audit is off: nothing was recorded"
        );
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        // A watch is logged when its response starts and again when it
        // ends; other requests once, when complete.
        let mut seen = std::collections::HashSet::new();
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|e| seen.insert(e["auditID"].as_str().unwrap_or_default().to_owned()))
            .filter_map(|e| AuditEvent::from_json(&e))
            .collect()
    }

    /// Stops every component: the node's (and every container on it)
    /// first, then the scheduler, …, etcd last.
    pub fn stop(&self) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        for node in nodes.iter_mut() {
            node.stop();
        }
        if !nodes.is_empty() {
            node::sweep(&self.dir);
        }
        drop(nodes);
        let mut components = self.components.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(mut c) = components.pop() {
            c.stop(Duration::from_secs(5));
        }
    }

    /// Freezes a component (SIGSTOP), e.g. `kube-apiserver`: requests to
    /// it hang until [`Cluster::resume`], as during a long GC pause or a
    /// stalled host.
    pub fn pause(&self, component: &str) {
        self.signal(component, libc::SIGSTOP);
    }

    /// Lets a [`Cluster::pause`]d component run again (SIGCONT).
    pub fn resume(&self, component: &str) {
        self.signal(component, libc::SIGCONT);
    }

    fn signal(&self, component: &str, signal: libc::c_int) {
        let pid = self
            .pids()
            .into_iter()
            .find(|(name, _)| *name == component)
            .unwrap_or_else(|| panic!("no running component named {component}"))
            .1;
        // SAFETY: kill(2) on a child of ours that has not been reaped.
        unsafe {
            libc::kill(pid as libc::pid_t, signal);
        }
    }

    /// The process ids of the running components, by name.
    pub fn pids(&self) -> Vec<(&'static str, u32)> {
        let components = self.components.lock().unwrap_or_else(|p| p.into_inner());
        components.iter().map(|c| (c.name, c.pid())).collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        if self.remove_dir {
            remove_run_dir(&self.dir);
        }
    }
}

/// One cluster for the whole test process, started on first use. Tests
/// sharing it keep to their own namespaces and uniquely named
/// cluster-scoped objects. Its processes die with the test process.
pub fn shared() -> &'static Cluster {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    SHARED.get_or_init(|| {
        // Started on a thread of its own: start() runs a private runtime,
        // which cannot nest in the calling test's.
        std::thread::spawn(|| Cluster::start(Options::default()))
            .join()
            .expect("the cluster start thread panicked")
            .unwrap_or_else(|e| panic!("starting the shared test cluster: {e}"))
    })
}

fn port_in_use(e: &Error) -> bool {
    match e {
        Error::Exited { tail, .. } | Error::NotReady { tail, .. } => {
            tail.contains("address already in use")
        }
        _ => false,
    }
}

/// `target/test-clusters/run-<pid>-<n>`, after removing the directories of
/// runs whose process is gone (a process killed before its destructors ran).
fn fresh_run_dir() -> Result<PathBuf, Error> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let parent = target_dir().join("test-clusters");
    if let Ok(entries) = std::fs::read_dir(&parent) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("run-").and_then(|r| r.split('-').next());
            if let Some(pid) = pid {
                if !Path::new("/proc").join(pid).exists() {
                    node::sweep(&entry.path());
                    remove_run_dir(&entry.path());
                }
            }
        }
    }
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = parent.join(format!("run-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| Error::Io {
        what: format!("create {}", dir.display()),
        source: e,
    })?;
    // kubelet refuses paths with `..` in them (target_dir() has one).
    dir.canonicalize()
        .map_err(io(format!("resolve {}", dir.display())))
}

/// Removes a run's directory, unless something is still mounted in it (a
/// pod volume bind-mounted from elsewhere must never be deleted through).
fn remove_run_dir(dir: &Path) {
    if node::has_mounts_below(dir) {
        eprintln!(
            "test-cluster: {} still has mounts below it; not removed",
            dir.display()
        );
        return;
    }
    let _ = std::fs::remove_dir_all(dir);
}

fn free_port() -> Result<u16, Error> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| Error::Io {
            what: "find a free loopback port".into(),
            source: e,
        })
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    std::fs::write(path, contents).map_err(io(format!("write {}", path.display())))
}

fn kubeconfig_yaml(url: &str, ca: &Path, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test-cluster\n  cluster:\n    server: {url}\n    certificate-authority: {ca}\ncontexts:\n- name: test-cluster\n  context:\n    cluster: test-cluster\n    namespace: default\n    user: test-cluster\ncurrent-context: test-cluster\nusers:\n- name: test-cluster\n  user:\n    token: {token:?}\n",
        ca = ca.display()
    )
}

async fn client_for(kubeconfig: &str) -> Result<kube::Client, Error> {
    let failed = |message: String| Error::Client {
        what: "building a kube client for the test cluster".into(),
        message,
    };
    let kubeconfig =
        kube::config::Kubeconfig::from_yaml(kubeconfig).map_err(|e| failed(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| failed(e.to_string()))?;
    kube::Client::try_from(config).map_err(|e| failed(e.to_string()))
}

/// One try at starting the four components in `dir` on fresh ports.
fn start_in(bin: &Path, dir: &Path, options: &Options) -> Result<Cluster, Error> {
    let logs = dir.join("logs");
    let data = dir.join("etcd");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&logs).map_err(io(format!("create {}", logs.display())))?;

    // A node's network comes first: the API server listens on, and
    // advertises, the machine's end of the node's link.
    // The API server listens on the first node's link; the others reach it
    // through theirs (an address of this machine).
    let mut networks = Vec::new();
    if let Some(node_options) = &options.node {
        for i in 0..node_options.count() {
            let prefix = match i {
                0 => String::new(),
                _ => format!("{}-", node::node_name(i)),
            };
            networks.push(node::Network::create(
                dir,
                &bin.join("pause"),
                &prefix,
                !node_options.private_paths.is_empty(),
            )?);
        }
    }
    let api_host = networks
        .first()
        .map_or(std::net::Ipv4Addr::LOCALHOST, |n| n.host_ip);
    let keys = pki::generate(dir, api_host)?;
    let admin_token = pki::random_token()?;
    let kubelet_tokens = networks
        .iter()
        .map(|_| pki::random_token())
        .collect::<Result<Vec<_>, _>>()?;
    let proxy_token = pki::random_token()?;
    let tokens = dir.join("tokens.csv");
    let mut token_lines =
        format!("{admin_token},{ADMIN_TOKEN_USER},{ADMIN_TOKEN_USER},\"system:masters\"\n");
    if !networks.is_empty() {
        // The identities the Node authorizer and RBAC's bootstrap bindings
        // know: a kubelet is system:node:NAME in system:nodes, kube-proxy is
        // system:kube-proxy (bound to system:node-proxier).
        for (i, token) in kubelet_tokens.iter().enumerate() {
            let name = node::node_name(i);
            token_lines +=
                &format!("{token},system:node:{name},system:node:{name},\"system:nodes\"\n");
        }
        token_lines += &format!("{proxy_token},system:kube-proxy,system:kube-proxy\n");
    }
    write(&tokens, &token_lines)?;

    let etcd_port = free_port()?;
    let peer_port = free_port()?;
    let api_port = free_port()?;
    let url = format!("https://{api_host}:{api_port}");
    let kubeconfig = dir.join("kubeconfig");
    write(&kubeconfig, &kubeconfig_yaml(&url, &keys.ca, &admin_token))?;

    let mut components = Vec::new();
    let s = |p: &Path| p.display().to_string();
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    components.push(Component::spawn(
        "etcd",
        &bin.join("etcd"),
        &[
            format!("--data-dir={}", s(&data)),
            format!("--listen-client-urls={etcd_url}"),
            format!("--advertise-client-urls={etcd_url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
            // Test data: durability is not worth an fsync per write.
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ],
        logs.join("etcd.log"),
    )?);

    let mut audit_flags = Vec::new();
    if options.audit {
        let policy = dir.join("audit-policy.yaml");
        let rules = if options.audit_groups.is_empty() {
            "- level: Metadata\n".to_owned()
        } else {
            format!(
                "- level: Metadata\n  userGroups: {:?}\n- level: None\n",
                options.audit_groups
            )
        };
        write(
            &policy,
            &format!(
                "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n{rules}"
            ),
        )?;
        let log = dir.join("audit.log");
        let _ = std::fs::remove_file(&log);
        audit_flags = vec![
            format!("--audit-policy-file={}", s(&policy)),
            format!("--audit-log-path={}", s(&log)),
            "--audit-log-format=json".into(),
            // Each event written before the request completes, so a test
            // that saw the answer finds the event.
            "--audit-log-mode=blocking".into(),
        ];
    }
    let node_flags: Vec<String> = if !networks.is_empty() {
        vec![
            // The `kubernetes` Service's endpoint: what pods reach through
            // kube-proxy.
            "--endpoint-reconciler-type=lease".into(),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            // No node-lifecycle controller runs to lift the not-ready taint
            // this puts on a new node.
            "--disable-admission-plugins=TaintNodesByCondition".into(),
        ]
    } else {
        vec![
            "--endpoint-reconciler-type=none".into(),
            "--authorization-mode=RBAC".into(),
            // No kubelet or node-lifecycle controller runs: the taint that
            // TaintNodesByCondition puts on new nodes would never go, and no
            // controller makes the `default` service account a pod needs.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition".into(),
        ]
    };
    components.push(Component::spawn(
        "kube-apiserver",
        &bin.join("kube-apiserver"),
        &[
            audit_flags,
            vec![format!("--etcd-servers={etcd_url}")],
            node_flags,
            vec![
                format!("--bind-address={api_host}"),
                // Without it the server looks for a default route, which a
                // sandbox may not have, to pick the address it advertises.
                format!("--advertise-address={api_host}"),
                format!("--secure-port={api_port}"),
                format!("--tls-cert-file={}", s(&keys.serving_cert)),
                format!("--tls-private-key-file={}", s(&keys.serving_key)),
                format!("--token-auth-file={}", s(&tokens)),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!(
                    "--service-account-key-file={}",
                    s(&keys.service_account_public)
                ),
                format!(
                    "--service-account-signing-key-file={}",
                    s(&keys.service_account_private)
                ),
                "--allow-privileged=true".into(),
                "--profiling=false".into(),
                "--v=1".into(),
            ],
        ]
        .concat(),
        logs.join("kube-apiserver.log"),
    )?);

    let mut cluster = Cluster {
        url,
        bin: bin.to_owned(),
        dir: dir.to_owned(),
        kubeconfig: kubeconfig.clone(),
        ca: keys.ca.clone(),
        admin_token,
        components: Mutex::new(components),
        remove_dir: false,
        started_in: Duration::ZERO,
        audit: false,
        nodes: Mutex::new(Vec::new()),
    };
    cluster.wait(
        "kube-apiserver",
        options.ready_timeout,
        "GET /readyz",
        |c| {
            Box::pin(async move {
                c.request_text(http::Request::get("/readyz").body(vec![]).unwrap())
                    .await
                    .is_ok()
            })
        },
    )?;

    let mut controllers = vec![
        "persistentvolume-binder-controller",
        "persistentvolume-protection-controller",
        "persistentvolumeclaim-protection-controller",
        "ephemeral-volume-controller",
        "garbage-collector-controller",
        "namespace-controller",
    ];
    let mut kcm_args = vec![];
    if !networks.is_empty() {
        // What a Deployment's and a DaemonSet's pods need to run and reach
        // the API server.
        controllers.extend([
            "deployment-controller",
            "replicaset-controller",
            "daemonset-controller",
            "serviceaccount-controller",
            "root-ca-certificate-publisher-controller",
            "endpointslice-controller",
            "endpointslice-mirroring-controller",
            "pod-garbage-collector-controller",
        ]);
        kcm_args.push(format!("--root-ca-file={}", s(&keys.ca)));
    }
    kcm_args.extend([
        format!("--kubeconfig={}", s(&kubeconfig)),
        format!("--controllers={}", controllers.join(",")),
        "--use-service-account-credentials=false".into(),
        // No HTTPS endpoint: nothing scrapes it and it would need a port.
        "--secure-port=0".into(),
        "--v=2".into(),
    ]);
    if let Some(qps) = options.controller_manager_qps {
        kcm_args.push(format!("--kube-api-qps={qps}"));
        kcm_args.push(format!("--kube-api-burst={}", qps.saturating_mul(2)));
    }
    let kcm = Component::spawn(
        "kube-controller-manager",
        &bin.join("kube-controller-manager"),
        &kcm_args,
        logs.join("kube-controller-manager.log"),
    )?;
    cluster.components.get_mut().unwrap().push(kcm);

    let scheduler_config = dir.join("scheduler.yaml");
    write(
        &scheduler_config,
        &format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: {kc}\nprofiles:\n- schedulerName: default-scheduler\n  pluginConfig:\n  - name: VolumeBinding\n    args:\n      bindTimeoutSeconds: {timeout}\n",
            kc = s(&kubeconfig),
            timeout = options.bind_timeout.as_secs().max(1),
        ),
    )?;
    let scheduler = Component::spawn(
        "kube-scheduler",
        &bin.join("kube-scheduler"),
        &[
            format!("--config={}", s(&scheduler_config)),
            "--secure-port=0".into(),
            "--v=2".into(),
        ],
        logs.join("kube-scheduler.log"),
    )?;
    cluster.components.get_mut().unwrap().push(scheduler);

    // Both take their leader-election Lease once their clients work and
    // before they start their controllers: a Lease held is a component up.
    for component in ["kube-controller-manager", "kube-scheduler"] {
        cluster.wait(
            component,
            options.ready_timeout,
            &format!("its Lease kube-system/{component} to be held"),
            move |c| {
                Box::pin(async move {
                    use k8s_openapi::api::coordination::v1::Lease;
                    let leases: kube::Api<Lease> = kube::Api::namespaced(c, "kube-system");
                    matches!(
                        leases.get_opt(component).await,
                        Ok(Some(lease)) if lease.spec.as_ref().and_then(|s| s.holder_identity.as_ref()).is_some()
                    )
                })
            },
        )?;
    }

    let node_options = options.node.clone().unwrap_or_default();
    for (i, (network, kubelet_token)) in networks.into_iter().zip(&kubelet_tokens).enumerate() {
        let access = node::Access {
            url: &cluster.url,
            ca: &keys.ca,
            kubelet_token,
            proxy_token: &proxy_token,
        };
        let node = node::Node::start(bin, dir, i, network, access, &node_options)?;
        cluster.nodes.get_mut().unwrap().push(node);
    }
    for name in cluster.node_names() {
        cluster.wait(
            "kubelet",
            options.ready_timeout,
            &format!("Node {name} to be Ready"),
            move |c| {
                let name = name.clone();
                Box::pin(async move {
                    use k8s_openapi::api::core::v1::Node;
                    let nodes: kube::Api<Node> = kube::Api::all(c);
                    let Ok(Some(node)) = nodes.get_opt(&name).await else {
                        return false;
                    };
                    node.status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
            },
        )?;
    }
    Ok(cluster)
}

impl Cluster {
    /// Polls `ready` with an admin client until it holds, failing as soon
    /// as any component exits and after `limit` at most.
    fn wait<F>(
        &mut self,
        component: &'static str,
        limit: Duration,
        what: &str,
        ready: F,
    ) -> Result<(), Error>
    where
        F: Fn(kube::Client) -> Pin<Box<dyn Future<Output = bool> + Send>>,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io("start a runtime to wait for the test cluster"))?;
        let kubeconfig = self.kubeconfig_with_token(&self.admin_token);
        let client = runtime.block_on(client_for(&kubeconfig))?;
        let deadline = Instant::now() + limit;
        loop {
            let nodes = self.nodes.get_mut().unwrap();
            let node_components = nodes.iter_mut().flat_map(|n| n.components_mut().iter_mut());
            for c in self
                .components
                .get_mut()
                .unwrap()
                .iter_mut()
                .chain(node_components)
            {
                if let Some(status) = c.exited() {
                    return Err(Error::Exited {
                        component: c.name,
                        status: status.to_string(),
                        log: c.log.clone(),
                        tail: c.log_excerpt(20),
                    });
                }
            }
            let ok = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), ready(client.clone()))
                    .await
                    .unwrap_or(false)
            });
            if ok {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let log = self.log_path(component);
                return Err(Error::NotReady {
                    component,
                    waited: limit,
                    what: what.to_owned(),
                    tail: process::log_excerpt(&log, 20),
                    log,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}
