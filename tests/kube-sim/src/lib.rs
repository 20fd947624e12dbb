//! A simulated Kubernetes API server for wasmprov's tests, benchmarks and
//! `dev` mode.
//!
//! It speaks the real HTTP/JSON API (k8s-openapi types on the wire) on a
//! loopback port: discovery, OpenAPI v3, list/watch with resourceVersions,
//! bookmarks and 410 Gone, create/update/patch (merge, JSON, strategic,
//! server-side apply)/delete with real conflicts, finalizers and
//! `deletionTimestamp`, and the parts of kube-controller-manager a volume
//! provisioner depends on (PV binder, protection finalizers, provisioner
//! annotations). Faults can be switched on at run time.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_sim::Error> {
//! let sim = kube_sim::Simulator::start(kube_sim::Config::default()).await?;
//! let client = sim.client()?;
//! # let _ = client;
//! sim.shutdown().await;
//! # Ok(()) }
//! ```

pub mod controllers;
mod convert;
mod discovery;
pub mod error;
pub mod faults;
mod http;
pub mod objects;
mod openapi;
pub mod patch;
mod protobuf;
pub mod registry;
mod requests;
pub mod resources;
pub mod selectors;
pub mod store;
mod table;
mod util;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

pub use controllers::ControllerConfig;
pub use error::ApiError;
pub use faults::{FailWith, FailureRule, FaultStats, Faults};
pub use requests::ApiRequest;

use registry::{Admission, Registry, Subresource, WriteOpts};

/// Simulator settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen; port 0 picks a free port. Keep it on loopback.
    pub bind: SocketAddr,
    /// How many change events the watch history retains; watches from older
    /// revisions get 410 Gone.
    pub history_window: usize,
    /// Seed for uids, generated names and fault dice.
    pub seed: u64,
    /// Built-in controllers.
    pub controllers: ControllerConfig,
    /// Interval between watch bookmarks (when the client allows them).
    pub bookmark_interval: Duration,
    /// Minor version reported by `/version` (1.x); kubectl picks its version from it.
    pub minor_version: u32,
    /// Nodes created at start (a real cluster has some; the scheduler helper needs one).
    pub nodes: Vec<String>,
    /// Keep a log of every resource request ([`Simulator::requests`]). Off by
    /// default: the log grows with every request.
    pub record_requests: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            history_window: 10_000,
            seed: 0x6b75_6265_7369_6d00,
            controllers: ControllerConfig::default(),
            bookmark_interval: Duration::from_secs(30),
            minor_version: 33,
            nodes: vec!["kube-sim-node".into()],
            record_requests: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding the simulated API server to {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("building a kube client for {url}: {message}")]
    Client { url: String, message: String },
    #[error("refusing to listen on {0}: the simulated API server has no authentication, use a loopback address such as 127.0.0.1")]
    NotLoopback(SocketAddr),
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// A running simulated API server. Dropping it stops it.
pub struct Simulator {
    addr: SocketAddr,
    registry: Arc<Registry>,
    faults: Faults,
    requests: Arc<requests::RequestLog>,
    tasks: JoinSet<()>,
}

const NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

impl Simulator {
    pub async fn start(config: Config) -> Result<Simulator, Error> {
        // No TLS, no authentication: never reachable from another machine.
        if !config.bind.ip().is_loopback() {
            return Err(Error::NotLoopback(config.bind));
        }
        let listener = TcpListener::bind(config.bind)
            .await
            .map_err(|source| Error::Bind {
                addr: config.bind,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.bind,
            source,
        })?;
        let store = Arc::new(store::Store::new(config.history_window));
        let admission = Admission {
            protection_finalizers: config.controllers.protection,
            default_storage_class: true,
        };
        let registry = Arc::new(Registry::new(store.clone(), config.seed, admission));
        bootstrap(&registry, &config)?;
        let faults = Faults::new(config.seed, store);
        let requests = Arc::new(requests::RequestLog::new(config.record_requests));
        let server = Arc::new(http::ApiServer {
            registry: registry.clone(),
            faults: faults.clone(),
            requests: requests.clone(),
            bookmark_interval: config.bookmark_interval,
            minor_version: config.minor_version,
        });
        let mut tasks = JoinSet::new();
        controllers::spawn(&registry, &faults, &config.controllers, &mut tasks);
        tasks.spawn(http::serve(listener, server));
        tracing::info!(%addr, "simulated Kubernetes API server listening");
        Ok(Simulator {
            addr,
            registry,
            faults,
            requests,
            tasks,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kube client pointed at this server (default namespace `default`).
    pub fn client(&self) -> Result<kube::Client, Error> {
        let url = self.url();
        let uri = url
            .parse()
            .map_err(|e: ::http::uri::InvalidUri| Error::Client {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let config = kube::Config::new(uri);
        kube::Client::try_from(config).map_err(|e| Error::Client {
            url,
            message: e.to_string(),
        })
    }

    /// A kubeconfig (YAML) for kubectl: `kubectl --kubeconfig FILE get pvc`.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-sim\n  cluster:\n    server: {url}\ncontexts:\n- name: kube-sim\n  context:\n    cluster: kube-sim\n    namespace: default\n    user: kube-sim\ncurrent-context: kube-sim\nusers:\n- name: kube-sim\n  user: {{}}\n",
            url = self.url()
        )
    }

    /// Fault injection switches.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Every resource request made so far, in order, with its RBAC verb and
    /// the client's bearer token as its user; discovery and other
    /// non-resource requests are not included. Panics unless
    /// [`Config::record_requests`] is on (an empty log would pass any test).
    pub fn requests(&self) -> Vec<ApiRequest> {
        assert!(
            self.requests.enabled(),
            "kube_sim::Config::record_requests is off: nothing was recorded"
        );
        self.requests.snapshot()
    }

    /// A kubeconfig (YAML) like [`Simulator::kubeconfig`] whose user sends
    /// `token` as a bearer token: [`Simulator::requests`] reports it as the
    /// requests' user.
    pub fn kubeconfig_with_token(&self, token: &str) -> String {
        self.kubeconfig()
            .replace("  user: {}\n", &format!("  user:\n    token: {token:?}\n"))
    }

    /// Direct access to the object store and its semantics (no HTTP, no faults).
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Act as the scheduler for a WaitForFirstConsumer claim: set
    /// `volume.kubernetes.io/selected-node` to an existing node.
    pub async fn schedule_claim(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
    ) -> Result<(), Error> {
        self.registry.get(resources::NODE, "", node)?;
        self.registry.modify(
            resources::PVC,
            namespace,
            name,
            Subresource::Main,
            "default-scheduler",
            |c| {
                objects::set_annotation(c, controllers::pv::ANN_SELECTED_NODE, node);
            },
        )?;
        Ok(())
    }

    /// Stop serving and stop the controllers; open connections are closed.
    pub async fn shutdown(mut self) {
        self.tasks.abort_all();
        while self.tasks.join_next().await.is_some() {}
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}

/// What a fresh cluster has: the system namespaces and some nodes.
fn bootstrap(registry: &Registry, config: &Config) -> Result<(), Error> {
    let opts = WriteOpts {
        manager: "kube-apiserver".into(),
        ..WriteOpts::default()
    };
    for ns in NAMESPACES {
        registry.create(
            resources::NAMESPACE,
            "",
            json!({"metadata": {"name": ns}}),
            &opts,
        )?;
    }
    for node in &config.nodes {
        let obj = json!({
            "metadata": {
                "name": node,
                "labels": {
                    "kubernetes.io/hostname": node,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "topology.kubernetes.io/zone": "kube-sim-zone",
                }
            },
            "status": {
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
                "nodeInfo": {
                    "kubeletVersion": format!("v1.{}.0", config.minor_version),
                    "architecture": "amd64", "operatingSystem": "linux",
                    "bootID": "", "containerRuntimeVersion": "", "kernelVersion": "", "kubeProxyVersion": "",
                    "machineID": "", "osImage": "kube-sim", "systemUUID": ""
                },
                "capacity": {"cpu": "2", "memory": "24Gi", "pods": "110"},
                "allocatable": {"cpu": "2", "memory": "24Gi", "pods": "110"}
            }
        });
        registry.create(resources::NODE, "", obj, &opts)?;
    }
    Ok(())
}
