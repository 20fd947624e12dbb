//! `wasmprov run`: the provisioner host against a real cluster.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::RuntimeArgs;
use crate::delivery::{self, WatchConfig};
use crate::leader::{self, LeaseConfig};
use crate::lifecycle::{self, Names};
use crate::metrics::Metrics;
use crate::ops::{self, Ops};
use crate::policy::RunsOn;
use crate::registry::PluginRegistry;
use crate::runtime::Runtime;

#[derive(Debug, Clone, Args)]
pub struct LifecycleArgs {
    /// The provisioner name StorageClasses use to select this host
    /// [default: wasmprov.io/host; node.wasmprov.io with --node-name].
    #[arg(long, env = "WASMPROV_PROVISIONER_NAME")]
    pub provisioner_name: Option<String>,
    /// More names this host answers to (comma-separated), e.g. to take over
    /// the classes of a provisioner it replaces.
    #[arg(long, value_delimiter = ',', env = "WASMPROV_EXTRA_PROVISIONER_NAMES")]
    pub extra_provisioner_names: Vec<String>,
    /// For a provisioner this host replaces (one of its names): the
    /// StorageClass whose plugin and parameters delete the volumes that
    /// provisioner made, when their own class names no plugin (it is gone,
    /// or still the old provisioner's), as NAME=CLASS, comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "NAME=CLASS", value_parser = parse_adoption, env = "WASMPROV_ADOPT_VOLUMES")]
    pub adopt_volumes: Vec<(String, String)>,
    /// Claims and volumes processed at once.
    #[arg(long, default_value_t = 4, env = "WASMPROV_WORKERS")]
    pub workers: u16,
    /// Add the `external-provisioner.volume.kubernetes.io/finalizer` finalizer
    /// to provisioned volumes, so deleting a volume object also deletes its storage.
    #[arg(long, env = "WASMPROV_ADD_FINALIZER")]
    pub add_finalizer: bool,
    /// Hold each claim with the `wasmprov.io/provisioning` finalizer from
    /// just before its plugin makes storage until that storage is saved as a
    /// volume. A claim deleted meanwhile, even while the host is down, then
    /// has its storage removed instead of leaked; the cost is two more API
    /// requests per claim, and claims left Terminating if the host is
    /// uninstalled mid-provision.
    #[arg(long, env = "WASMPROV_CLAIM_FINALIZER")]
    pub claim_finalizer: bool,
    /// Failed provisions of one claim before giving up (0: never).
    #[arg(
        long,
        default_value_t = 15,
        env = "WASMPROV_FAILED_PROVISION_THRESHOLD"
    )]
    pub failed_provision_threshold: u32,
    /// How often every claim and volume is looked at again, and what was
    /// given up on (the thresholds) tried once more, as the Go library's
    /// informer resync does ("0s": never).
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration, env = "WASMPROV_RESYNC_PERIOD")]
    pub resync_period: std::time::Duration,
    /// The wait before retrying a failed claim, volume or expansion; it
    /// doubles with each failure up to --retry-interval-max (the Go
    /// library's and CSI sidecars' flag names; the Go library's defaults).
    #[arg(long, default_value = "15s", value_name = "DURATION", value_parser = parse_retry_interval, env = "WASMPROV_RETRY_INTERVAL_START")]
    pub retry_interval_start: std::time::Duration,
    /// The longest wait between retries. With the defaults, a claim is
    /// given up on (--failed-provision-threshold) after about 2.5 hours.
    #[arg(long, default_value = "1000s", value_name = "DURATION", value_parser = parse_retry_interval, env = "WASMPROV_RETRY_INTERVAL_MAX")]
    pub retry_interval_max: std::time::Duration,
    /// Failed deletes of one volume before giving up (0: never).
    #[arg(long, default_value_t = 15, env = "WASMPROV_FAILED_DELETE_THRESHOLD")]
    pub failed_delete_threshold: u32,
    /// Attempts to save a provisioned PersistentVolume when the API server
    /// fails (5xx, 429, a lost connection), then to delete its storage if
    /// it could not be saved, so that storage does not leak (the Go
    /// library's CreateProvisionedPVRetryCount). 1: no retry.
    #[arg(long, default_value_t = 5, value_name = "N", value_parser = parse_save_attempts, env = "WASMPROV_SAVE_ATTEMPTS")]
    pub save_attempts: usize,
    /// The wait between those attempts (the Go library's
    /// CreateProvisionedPVInterval). The claim's worker waits with them: up
    /// to (attempts - 1) × interval for the save, as long for the delete.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = parse_save_retry_interval, env = "WASMPROV_SAVE_RETRY_INTERVAL")]
    pub save_retry_interval: std::time::Duration,
    /// Sustained Kubernetes API requests per second of the provisioning
    /// lifecycle (0: no limit). A claim costs about 3 requests (the volume's
    /// create and two events); a watch costs one to start. The default
    /// is external-provisioner's; raise it for many busy StorageClasses.
    /// Leader election has its own, unlimited client.
    #[arg(long, default_value_t = 5.0, env = "WASMPROV_KUBE_API_QPS")]
    pub kube_api_qps: f32,
    /// Kubernetes API requests the lifecycle may send at once (the token
    /// bucket's size) before --kube-api-qps paces it.
    #[arg(long, default_value_t = 10, env = "WASMPROV_KUBE_API_BURST")]
    pub kube_api_burst: u32,
    /// How long any Kubernetes API request may take, its answer and kube's
    /// own retries of a 429/503/504 included, before it fails and is
    /// retried like any failure ("0s": no limit). Watches are exempt.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = parse_kube_api_timeout, env = "WASMPROV_KUBE_API_TIMEOUT")]
    pub kube_api_timeout: std::time::Duration,
}

impl LifecycleArgs {
    /// The name classes select this host by: --provisioner-name, else the
    /// central or (`node_mode`) the node hosts' default.
    pub fn provisioner_name(&self, node_mode: bool) -> String {
        let default = if node_mode {
            super::DEFAULT_NODE_PROVISIONER_NAME
        } else {
            super::DEFAULT_PROVISIONER_NAME
        };
        self.provisioner_name
            .clone()
            .unwrap_or_else(|| default.to_owned())
    }

    /// The lifecycle's configuration (of a central host, or a node host if
    /// `node_mode`), or what is inconsistent between flags.
    pub fn config(&self, node_mode: bool) -> anyhow::Result<lifecycle::Config> {
        let primary = self.provisioner_name(node_mode);
        let mut config = lifecycle::Config::new(primary.clone());
        config.names = Names {
            primary,
            additional: self.extra_provisioner_names.clone(),
        };
        for (name, class) in &self.adopt_volumes {
            if !config.names.contains(name) {
                anyhow::bail!(
                    "--adopt-volumes {name}={class}: {name} is not a name this host serves, so its \
                     volumes are never this host's; add it to --extra-provisioner-names"
                );
            }
            config.adopt_volumes.insert(name.clone(), class.clone());
        }
        config.workers = self.workers.max(1);
        config.add_finalizer = self.add_finalizer;
        config.claim_finalizer = self.claim_finalizer;
        config.failed_provision_threshold = self.failed_provision_threshold;
        config.failed_delete_threshold = self.failed_delete_threshold;
        config.resync = self.resync_period;
        if self.retry_interval_max < self.retry_interval_start {
            anyhow::bail!(
                "--retry-interval-max ({}) is less than --retry-interval-start ({}): the \
                 longest wait cannot be shorter than the first; raise --retry-interval-max",
                humantime::format_duration(self.retry_interval_max),
                humantime::format_duration(self.retry_interval_start)
            );
        }
        config.retry_base = self.retry_interval_start;
        config.max_retry = self.retry_interval_max;
        config.save_attempts = self.save_attempts;
        config.save_retry_interval = self.save_retry_interval;
        Ok(config)
    }

    /// The client-side rate limit of `--kube-api-qps`/`--kube-api-burst`.
    pub fn api_limits(&self) -> lifecycle::ApiLimits {
        lifecycle::ApiLimits {
            qps: self.kube_api_qps,
            burst: self.kube_api_burst,
        }
    }

    /// `--kube-api-timeout`, `None` for no limit.
    pub fn api_timeout(&self) -> Option<Duration> {
        Some(self.kube_api_timeout).filter(|d| !d.is_zero())
    }
}

/// `--adopt-volumes NAME=CLASS`.
fn parse_adoption(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((name, class)) if !name.is_empty() && !class.is_empty() => {
            Ok((name.to_owned(), class.to_owned()))
        }
        _ => Err(format!(
            "{value:?} is not NAME=CLASS, e.g. example.com/hostpath=hostpath"
        )),
    }
}

/// `--save-attempts`: 0 would never save a volume at all.
fn parse_save_attempts(value: &str) -> Result<usize, String> {
    let n: usize = value
        .parse()
        .map_err(|_| format!("{value:?} is not a whole number of attempts"))?;
    if n == 0 {
        return Err(
            "must be at least 1: a volume is saved at least once (1 means no retry)".to_owned(),
        );
    }
    Ok(n)
}

/// `--save-retry-interval`: above zero (retrying a failing API server at
/// once only adds to its load), at most an hour (a worker waits it out).
/// `--retry-interval-start`/`-max`: above zero (a zero wait would retry a
/// failing claim as fast as the API allows).
fn parse_retry_interval(value: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(value)
        .map_err(|e| format!("{value:?} is not a duration such as 15s or 500ms: {e}"))?;
    if d.is_zero() {
        return Err("must be above zero, e.g. 15s (the Go library's default)".to_owned());
    }
    Ok(d)
}

fn parse_save_retry_interval(value: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(value)
        .map_err(|e| format!("{value:?} is not a duration such as 10s or 500ms: {e}"))?;
    if d.is_zero() {
        return Err("must be above zero, e.g. 10s (the Go library's default)".to_owned());
    }
    if d > Duration::from_secs(3600) {
        return Err(format!(
            "{} is more than an hour: the claim's worker waits between attempts, so keep it short (default 10s)",
            humantime::format_duration(d)
        ));
    }
    Ok(d)
}

/// `--kube-api-timeout`: 0s (none) or long enough for a busy API server.
fn parse_kube_api_timeout(value: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(value)
        .map_err(|e| format!("{value:?} is not a duration such as 30s, or 0s for none: {e}"))?;
    if !d.is_zero() && d < Duration::from_secs(1) {
        return Err(format!(
            "{} is too short: a busy API server takes longer to answer, and every request \
             would fail; use at least 1s (default 30s), or 0s for no limit",
            humantime::format_duration(d)
        ));
    }
    Ok(d)
}

#[derive(Debug, Args)]
#[command(group(
    clap::ArgGroup::new("plugin_source")
        .required(true)
        .multiple(true)
        .args(["plugins_dir", "plugin_configmaps"])
))]
pub struct RunArgs {
    /// Directory of plugins, watched for changes: each `<name>.wasm` (or
    /// `.wasm.gz`, `.wasm.zst`) serves the classes whose `parameters.plugin`
    /// is `<name>`. New versions replace old ones without a restart.
    #[arg(long, value_name = "DIR", env = "WASMPROV_PLUGINS_DIR")]
    pub plugins_dir: Option<PathBuf>,
    /// Also load plugins from ConfigMaps labelled `wasmprov.io/plugin` in
    /// --plugins-namespace, read through the API: no kubelet delay, and
    /// plugins too large for one ConfigMap come in parts (`wasmprov plugin
    /// pack`). Needs list and watch on configmaps (deploy/api-source/).
    #[arg(long, env = "WASMPROV_PLUGIN_CONFIGMAPS")]
    pub plugin_configmaps: bool,
    /// Namespace of the plugin ConfigMaps [default: $POD_NAMESPACE, else "default"].
    #[arg(long, env = "WASMPROV_PLUGINS_NAMESPACE")]
    pub plugins_namespace: Option<String>,
    /// Kubeconfig file; without it the in-cluster config (or $KUBECONFIG,
    /// ~/.kube/config) is used.
    #[arg(long, value_name = "FILE", env = "WASMPROV_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Address of the /metrics, /healthz and /readyz endpoints.
    #[arg(long, default_value = "0.0.0.0:8080", env = "WASMPROV_METRICS_ADDRESS")]
    pub metrics_address: SocketAddr,
    /// Elect a leader through a Lease so only one replica provisions.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, env = "WASMPROV_LEADER_ELECTION")]
    pub leader_election: bool,
    /// Namespace of the leader Lease [default: $POD_NAMESPACE, else "default"].
    #[arg(long, env = "WASMPROV_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// How long a leader's Lease holds without renewal: how long a crashed
    /// leader's classes wait before a standby takes over.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration, env = "WASMPROV_LEADER_ELECTION_LEASE_DURATION")]
    pub leader_election_lease_duration: std::time::Duration,
    /// How long the leader keeps trying to renew before it stops leading.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, env = "WASMPROV_LEADER_ELECTION_RENEW_DEADLINE")]
    pub leader_election_renew_deadline: std::time::Duration,
    /// How often the leader renews and a standby tries to acquire.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration, env = "WASMPROV_LEADER_ELECTION_RETRY_PERIOD")]
    pub leader_election_retry_period: std::time::Duration,
    /// This replica's identity in the Lease [default: $POD_NAME, else the host name].
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Node mode: the node this host runs on (the pod's spec.nodeName). It
    /// serves the policy's `runsOn: node` plugins, provisions only claims
    /// whose selected node is this one, pins their volumes to it, and
    /// deletes or grows only volumes pinned to it; one host per node (a
    /// DaemonSet), each under a Lease of its node.
    #[arg(long, value_name = "NODE", env = "NODE_NAME")]
    pub node_name: Option<String>,
    /// Node mode: how long a node must have been gone (no Node object by
    /// that name or hostname label) before the Released volumes pinned to
    /// it are reported (a VolumeNodeGone Warning, the
    /// wasmprov_volumes_on_gone_nodes gauge) and kept. A NotReady node is
    /// not gone.
    #[arg(long, default_value = "30s", value_name = "DURATION", value_parser = humantime::parse_duration, env = "WASMPROV_GONE_NODE_GRACE")]
    pub gone_node_grace: std::time::Duration,
    /// Node mode: delete the PersistentVolume objects of Released volumes
    /// whose node is gone (after --gone-node-grace; their storage went with
    /// the node, no plugin is called) instead of keeping them. Per volume:
    /// the annotation wasmprov.io/forget-when-node-gone=true.
    #[arg(long, env = "WASMPROV_FORGET_GONE_NODE_VOLUMES")]
    pub forget_gone_node_volumes: bool,
    /// Node mode: how long a node's host Lease may go unrenewed before the
    /// janitor warns on the claims waiting for that node (no node host runs
    /// there: the DaemonSet's tolerations or nodeSelector, most likely).
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = humantime::parse_duration, env = "WASMPROV_MISSING_HOST_GRACE")]
    pub missing_host_grace: std::time::Duration,
    /// Node mode: publish the room this node has for each class it serves
    /// as CSIStorageCapacity objects in the host's namespace, which the
    /// scheduler reads when the provisioner has a CSIDriver with
    /// storageCapacity: true (deploy/csidriver.yaml). Without it the host
    /// still refuses claims its node cannot hold.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL", env = "WASMPROV_PUBLISH_CAPACITY")]
    pub publish_capacity: bool,
    /// Node mode: how often the disks are measured again when no volume
    /// comes, grows or goes (each change is published within a second).
    #[arg(long, default_value = "60s", value_name = "DURATION", value_parser = humantime::parse_duration, env = "WASMPROV_CAPACITY_POLL_INTERVAL")]
    pub capacity_poll_interval: std::time::Duration,
    /// Node mode: the host's Pod UID (downward API metadata.uid), so that
    /// the capacity objects it publishes are owned by its Pod and go with it.
    #[arg(long, value_name = "UID", env = "POD_UID")]
    pub pod_uid: Option<String>,
    #[command(flatten)]
    pub lifecycle: LifecycleArgs,
    #[command(flatten)]
    pub runtime: RuntimeArgs,
}

/// Node mode: how this host publishes its node's capacity, if it does.
fn capacity_publishing(
    args: &RunArgs,
    config: &lifecycle::Config,
) -> Option<lifecycle::capacity::publish::Publishing> {
    if !args.publish_capacity {
        return None;
    }
    let name = &config.names.primary;
    if let Some(problem) = lifecycle::capacity::publish::driver_name_problem(name) {
        tracing::warn!(provisioner = %name, "not publishing capacity: the scheduler looks up a CSIDriver named as the provisioner, and {problem}; choose a --provisioner-name such as node.wasmprov.io, or pass --publish-capacity=false. Claims this node cannot hold are still refused");
        return None;
    }
    if args.capacity_poll_interval.is_zero() {
        tracing::warn!(
            "--capacity-poll-interval=0: capacity is published only when a volume or class changes"
        );
    }
    let pod_uid = args.pod_uid.as_ref().filter(|uid| !uid.is_empty());
    let owner = match (&args.identity, pod_uid) {
        (Some(pod), Some(uid)) => Some(OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.clone(),
            uid: uid.clone(),
            ..Default::default()
        }),
        _ => {
            tracing::info!("no POD_NAME and POD_UID: the CSIStorageCapacity objects this host publishes have no owner, and stay if it goes");
            None
        }
    };
    Some(lifecycle::capacity::publish::Publishing {
        namespace: config.node_lease_namespace.clone(),
        owner,
        poll_interval: if args.capacity_poll_interval.is_zero() {
            Duration::MAX
        } else {
            args.capacity_poll_interval
        },
    })
}

/// client-go's rules: a leader stops leading before its Lease can expire,
/// and retries several times within its renew deadline.
fn check_lease_timings(args: &RunArgs) -> anyhow::Result<()> {
    let show = |d: std::time::Duration| humantime::format_duration(d).to_string();
    let (lease, renew, retry) = (
        args.leader_election_lease_duration,
        args.leader_election_renew_deadline,
        args.leader_election_retry_period,
    );
    if renew >= lease {
        anyhow::bail!(
            "--leader-election-renew-deadline ({}) must be shorter than --leader-election-lease-duration ({}): \
             a leader still trying to renew when its Lease expires would lead beside its successor",
            show(renew),
            show(lease)
        );
    }
    if retry.is_zero() || retry.mul_f64(1.2) >= renew {
        anyhow::bail!(
            "--leader-election-retry-period ({}) must be above zero and well under --leader-election-renew-deadline ({}): \
             the leader needs several tries to renew before it gives up",
            show(retry),
            show(renew)
        );
    }
    Ok(())
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    if args.leader_election {
        check_lease_timings(&args)?;
    }
    let node_mode = args.node_name.is_some();
    if args.node_name.as_deref() == Some("") {
        anyhow::bail!(
            "--node-name is empty: set it to the node this host runs on, from the pod's \
             spec.nodeName (env NODE_NAME through the downward API)"
        );
    }
    if node_mode && args.runtime.policy.is_none() {
        anyhow::bail!(
            "--node-name without --policy: a node host serves the plugins the sandbox policy \
             gives to nodes (runsOn: node) and no other; pass the policy file"
        );
    }
    let mut config = args.lifecycle.config(node_mode)?;
    let kube_config = match &args.kubeconfig {
        Some(path) => {
            // Read it here: kube's own error repeats its cause and quotes the path twice.
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).with_context(|| {
                format!("kubeconfig {} is not a valid kubeconfig", path.display())
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("kubeconfig {} is not usable", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no cluster configuration found: run in a pod, set $KUBECONFIG, or pass --kubeconfig",
        )?,
    };
    // The lifecycle's client is rate limited (--kube-api-qps/-burst); leader
    // election gets its own, so a busy provisioner never misses a renewal
    // (as external-provisioner does). Every request is bounded by
    // --kube-api-timeout.
    let timeout = args.lifecycle.api_timeout();
    let unlimited = lifecycle::ApiLimits::unlimited();
    let client = lifecycle::throttle::client_with_timeout(
        kube_config.clone(),
        args.lifecycle.api_limits(),
        timeout,
    )?;
    let configmaps_client =
        lifecycle::throttle::client_with_timeout(kube_config.clone(), unlimited, timeout)?;
    // Without kube's retries: they wait out a 429's Retry-After up to 15
    // times, past the renew deadline; the election retries every
    // retry period itself.
    let mut election_config = kube_config;
    election_config.default_retry = false;
    let election_client =
        lifecycle::throttle::client_with_timeout(election_config, unlimited, timeout)?;
    let ops = Arc::new(Ops::default());
    let listener = ops::bind(args.metrics_address).await?;
    let server = tokio::spawn(ops::serve(listener, ops.clone()));
    // Every replica loads plugins, leader or not, so a takeover is immediate.
    let configmaps = args.plugin_configmaps.then(|| delivery::ConfigMapsSource {
        // Not rate limited: a list, a watch, and an event per new version.
        client: configmaps_client,
        namespace: args.plugins_namespace.clone().unwrap_or_else(pod_namespace),
        reporter: crate::events::Reporter {
            controller: config.controller_name.clone(),
            instance: args.identity.clone(),
        },
        initial_timeout: Duration::from_secs(30),
    });
    // Before any plugin loads: a node host on a node that is not there
    // (a wrong --node-name) would serve nobody.
    if let Some(name) = &args.node_name {
        config.node = Some(lifecycle::OwnNode::lookup(&client, name).await?);
        config.gone_node_grace = args.gone_node_grace;
        config.forget_gone_node_volumes = args.forget_gone_node_volumes;
        config.missing_host_grace = args.missing_host_grace;
        config.node_lease_namespace = args
            .leader_election_namespace
            .clone()
            .unwrap_or_else(pod_namespace);
        config.publish_capacity = capacity_publishing(&args, &config);
    }
    let side = if node_mode {
        RunsOn::Node
    } else {
        RunsOn::Central
    };
    let registry = serve_plugins(
        args.plugins_dir.as_deref(),
        configmaps,
        &args.runtime,
        side,
        ops.metrics.clone(),
    )
    .await?;
    ops.check_readiness({
        let registry = registry.clone();
        Box::new(move || registry.unready_reason())
    });
    ops.add_notes({
        let registry = registry.clone();
        Box::new(move || registry.notes())
    });
    ops.set_ready(true);
    // Node hosts elect one of them janitor, for the claims no node host
    // takes (a gone selected node, a class binding Immediately).
    let mut janitor = None;
    if config.node.is_some() && !args.leader_election {
        tracing::warn!("--leader-election=false: the node hosts elect no janitor, so claims selected for a node that is gone, and Immediate claims of node classes, are left as they are");
    }
    if config.node.is_some() && args.leader_election {
        let (tx, rx) = tokio::sync::watch::channel(false);
        config.janitor = Some(rx);
        let lease = lease_config(
            &args,
            &format!("{}-janitor", leader::lease_name(&config.names.primary)),
        );
        janitor = Some(elect_janitor(election_client.clone(), lease, tx));
    }
    let lifecycle = lifecycle::run(
        client.clone(),
        registry,
        config.clone(),
        ops.metrics.clone(),
        shutdown_signal(),
    );
    let work = async {
        if !args.leader_election {
            ops.metrics.leader.set(1);
            lifecycle.await;
            return Ok(());
        }
        // Node hosts work side by side, one per node: each holds its node's
        // Lease, so two hosts never serve one node at once.
        let lease_name = match &config.node {
            Some(node) => leader::node_lease_name(&config.names.primary, &node.name),
            None => leader::lease_name(&config.names.primary),
        };
        let mut lease = lease_config(&args, &lease_name);
        if config.node.is_some() {
            // A live holder renews its Lease within the lease duration, an
            // earlier pod of this host lets it expire: held and renewed for
            // twice that long, it is another host serving this node.
            lease.standby_limit = Some(lease.lease_duration * 2);
        }
        let metrics = ops.metrics.clone();
        leader::run_as_leader(
            election_client,
            lease,
            move |l| {
                metrics.leader.set(i64::from(l));
            },
            lifecycle,
        )
        .await
        .map_err(|e| match (&e, &config.node) {
            (leader::LeaseError::HeldElsewhere { .. }, Some(node)) => {
                anyhow::anyhow!(e).context(format!(
                    "another wasmprov host already serves node {}: one host per node (stop the \
                     other one, e.g. a second DaemonSet of the same provisioner name)",
                    node.name
                ))
            }
            _ => anyhow::anyhow!(e).context("stopping: another replica may take over"),
        })
    };
    let janitor = async {
        match janitor {
            Some(task) => task.await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = work => r,
        () = janitor => Ok(()),
        r = server => match r {
            Ok(Err(e)) => Err(anyhow::anyhow!(e).context(format!("cannot serve metrics on {}", args.metrics_address))),
            _ => Ok(()),
        },
    }
}

/// The Lease `name` with the election flags' namespace, identity and timings.
fn lease_config(args: &RunArgs, name: &str) -> LeaseConfig {
    let namespace = args
        .leader_election_namespace
        .clone()
        .unwrap_or_else(pod_namespace);
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let mut lease = LeaseConfig::new(&namespace, name, &identity);
    lease.lease_duration = args.leader_election_lease_duration;
    lease.renew_deadline = args.leader_election_renew_deadline;
    lease.retry_period = args.leader_election_retry_period;
    lease
}

/// Campaigns for the janitor's Lease for ever, telling `janitor` while this
/// host holds it; losing it only means campaigning again.
async fn elect_janitor(
    client: kube::Client,
    lease: LeaseConfig,
    janitor: tokio::sync::watch::Sender<bool>,
) {
    loop {
        let held = leader::run_as_leader(
            client.clone(),
            lease.clone(),
            |j| {
                janitor.send_replace(j);
            },
            std::future::pending::<()>(),
        )
        .await;
        if let Err(e) = held {
            tracing::warn!(error = %e, "no longer the node hosts' janitor; campaigning again");
        }
        tokio::time::sleep(lease.retry_period).await;
    }
}

/// Loads the plugins of the directory and/or the ConfigMaps under the
/// sandbox policy, then keeps following them and the policy file: new
/// versions are validated and swapped in as they arrive.
pub async fn serve_plugins(
    dir: Option<&Path>,
    configmaps: Option<delivery::ConfigMapsSource>,
    args: &RuntimeArgs,
    side: RunsOn,
    metrics: Arc<Metrics>,
) -> anyhow::Result<Arc<PluginRegistry>> {
    let runtime = Runtime::new(args.runtime_config()?)?;
    let sources = delivery::Sources {
        dir,
        configmaps,
        policy: args.policy.as_deref(),
        side,
    };
    delivery::serve(sources, Arc::new(runtime), metrics, WatchConfig::default()).await
}

/// The pod's namespace (downward API), else "default".
fn pod_namespace() -> String {
    std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".to_owned())
}

/// The host name plus the process id: unique enough among replicas.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "wasmprov".to_owned());
    format!("{host}-{}", std::process::id())
}

/// Completes on Ctrl-C or SIGTERM (what Kubernetes sends to stop a pod).
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
}
