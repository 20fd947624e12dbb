//! The provisioning lifecycle end to end: what a cluster operator observes
//! (claims, volumes, events, directories). Each scenario runs on the real
//! control plane (`real::…`, the ground truth: its PV binder, protection
//! controllers and scheduler) and on the simulated API server
//! (`simulated::…`, fast, and kept honest by the comparison); those that
//! need faults a real server does not produce on demand run on the
//! simulator only.

#[macro_use]
mod support;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client, ResourceExt};
use support::*;
use wasmprov::lifecycle;
use wasmprov::metrics::Metrics;
use wasmprov::policy::PolicySet;
use wasmprov::runtime::{Runtime, RuntimeConfig};

const PROVISIONER: &str = "wasmprov.io/host";
const NODE: &str = "worker-1";
const CLAIM_FINALIZER: &str = "wasmprov.io/provisioning";
/// The webhook configuration that makes volume saves fail on the real server.
const SAVE_BLOCKER: &str = "block-volume-saves";

on_both_servers!(
    a_claim_gets_a_bound_volume_and_deleting_it_removes_the_storage,
    a_retain_volume_and_its_storage_outlive_the_claim,
    one_host_serves_two_classes_with_two_plugins,
    claims_of_other_provisioners_are_left_alone,
    an_unknown_plugin_is_reported_on_the_claim,
    a_claim_waits_for_its_missing_class_then_gets_provisioned,
    wait_for_first_consumer_provisions_on_the_selected_node,
    a_refused_node_is_given_up_for_another,
    block_mode_is_refused_for_a_plugin_without_block_support,
    a_restarted_host_makes_exactly_one_volume_per_claim,
    with_leader_election_only_the_leader_provisions_and_a_standby_takes_over,
    a_claim_deleted_while_its_storage_is_being_created_leaves_nothing_behind,
    a_claim_deleted_mid_create_whose_clean_up_fails_once_leaves_nothing_behind,
    class_parameters_stay_on_the_class_and_reach_delete_from_it,
    with_the_claim_finalizer_a_deleted_claim_waits_until_its_storage_is_removed,
    a_volume_being_deleted_is_not_taken_for_the_claims_own,
    with_the_finalizer_a_deleted_bound_volume_keeps_its_storage_until_released,
    a_failed_delete_keeps_the_volume_and_says_why,
    a_volume_that_cannot_be_saved_is_cleaned_up_then_provisioned_when_the_api_recovers,
    a_host_killed_mid_provision_and_restarted_leaves_one_volume_per_claim_and_no_leak,
    with_the_claim_finalizer_a_claim_deleted_while_the_host_is_down_leaves_no_storage,
    a_claim_that_keeps_failing_is_given_up_with_an_event_saying_how_to_retry,
    a_volume_that_keeps_failing_to_delete_is_given_up_with_an_event,
    a_standby_process_takes_over_when_the_leader_process_is_killed,
    a_leader_process_exits_when_the_api_freezes,
    the_hosts_own_claim_writes_do_not_cut_a_backoff_short,
    an_invalid_argument_counts_towards_giving_up,
    an_empty_selected_node_is_no_node,
    reschedule_without_a_selected_node_is_retried_with_backoff,
    a_released_retain_volume_an_admin_deletes_goes,
    the_volume_finalizer_follows_the_flag_on_existing_volumes,
    a_provisioner_undoing_the_volume_finalizer_is_detected_and_left_alone,
    a_provisioner_adding_back_the_volume_finalizer_is_detected_and_left_alone,
    a_claim_given_up_on_is_tried_again_at_the_next_resync,
    a_claim_waiting_for_its_plugin_is_provisioned_when_the_plugin_loads,
    a_volume_outside_the_plugins_output_policy_is_refused_and_its_storage_removed,
    a_plugin_cannot_hand_a_claim_another_claims_directory,
    the_clean_up_of_a_refused_volume_cannot_swap_in_a_link,
    a_claim_deleted_after_no_change_still_has_its_storage_removed,
    the_storage_of_an_unsaved_volume_is_deleted_with_retries,
    the_volumes_of_a_replaced_go_provisioner_are_adopted_and_reclaimed,
    a_claim_asking_for_more_gets_its_volume_grown,
    a_plugin_that_cannot_grow_volumes_marks_the_expansion_infeasible,
    an_infeasible_expansion_recovers_when_the_claim_asks_for_less,
    a_volume_is_never_shrunk,
    the_retry_interval_flags_pace_a_failing_claim,
    a_failing_expansion_is_retried_with_backoff_not_on_its_own_writes,
    a_failed_expansion_is_replaced_by_a_smaller_request,
    a_claim_naming_its_class_by_the_beta_annotation_is_provisioned,
    a_claim_whose_class_was_deleted_is_reported_counted_and_given_up,
    a_host_that_stopped_between_saving_the_volume_and_the_claim_still_leaves_the_filesystem_step,
);

/// A cluster (real or simulated, with one node) with a wasmprov host
/// serving the given plugins.
struct Cluster {
    api: TestApi,
    client: Client,
    volumes_dir: tempfile::TempDir,
    _plugins_dir: tempfile::TempDir,
    metrics: Arc<Metrics>,
    /// Changes to the tests' lifecycle configuration.
    tune: fn(&mut lifecycle::Config),
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    host: Option<tokio::task::JoinHandle<()>>,
}

impl Cluster {
    async fn start(server: Server, plugins: &[(&str, PathBuf)]) -> Self {
        Self::start_with(server, plugins, |_| {}).await
    }

    async fn start_with(
        server: Server,
        plugins: &[(&str, PathBuf)],
        tune: fn(&mut lifecycle::Config),
    ) -> Self {
        let (api, client) = TestApi::start(
            server,
            &[NODE],
            // A log of requests by bearer token, for the request budget.
            kube_sim::Config {
                record_requests: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await;
        let volumes_dir = tempfile::tempdir().unwrap();
        let plugins_dir = tempfile::tempdir().unwrap();
        for (name, file) in plugins {
            std::fs::copy(file, plugins_dir.path().join(format!("{name}.wasm"))).unwrap();
        }
        let mut cluster = Self {
            api,
            client,
            volumes_dir,
            _plugins_dir: plugins_dir,
            metrics: Arc::new(Metrics::default()),
            tune,
            stop: None,
            host: None,
        };
        cluster
            .start_host(cluster._plugins_dir.path().to_owned())
            .await;
        cluster
    }

    async fn start_host(&mut self, plugins_dir: PathBuf) {
        self.start_host_with_client(plugins_dir, self.client.clone())
            .await;
    }

    /// A host talking to the API server through `client`.
    async fn start_host_with_client(&mut self, plugins_dir: PathBuf, client: Client) {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        self.stop = Some(tx);
        let host = host(
            client,
            &plugins_dir,
            self.volumes_dir.path(),
            self.metrics.clone(),
            self.tune,
            async move {
                let _ = rx.await;
            },
        )
        .await;
        self.host = Some(tokio::spawn(host));
    }

    async fn stop_host(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.host.take() {
            let _ = h.await;
        }
    }

    fn sim(&self) -> &kube_sim::Simulator {
        self.api.sim()
    }

    /// A client of the simulator whose requests it logs as `token`'s.
    async fn client_with_token(&self, token: &str) -> Client {
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(&self.sim().kubeconfig_with_token(token)).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        Client::try_from(config).unwrap()
    }

    /// The requests `user` sent with `verb` on `resource`.
    fn requests_of(&self, user: &str, verb: &str, resource: &str) -> usize {
        self.sim()
            .requests()
            .iter()
            .filter(|r| r.user == user && r.verb == verb && r.resource == resource)
            .count()
    }

    async fn use_claim_in_a_pod(&self, claim: &str) {
        self.api
            .use_claim_in_a_pod(&self.client, "default", claim, NODE)
            .await
    }

    /// Every PersistentVolume create fails with 500 from now on. On the
    /// real server that is an admission webhook that cannot be reached
    /// (failurePolicy Fail): the API server's own InternalError.
    async fn fail_volume_saves(&self) {
        match &self.api {
            TestApi::Simulated(sim) => sim.faults().fail_requests(
                kube_sim::FailureRule::new(1.0, kube_sim::FailWith::Internal)
                    .verbs(&["create"])
                    .resources(&["persistentvolumes"]),
            ),
            TestApi::Real(_) => {
                use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
                let unreachable = support::free_port();
                let webhook: ValidatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": SAVE_BLOCKER},
                    "webhooks": [{
                        "name": "block.volume-saves.test",
                        "clientConfig": {"url": format!("https://127.0.0.1:{unreachable}/")},
                        "rules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                   "operations": ["CREATE"], "resources": ["persistentvolumes"]}],
                        "failurePolicy": "Fail",
                        "sideEffects": "None",
                        "admissionReviewVersions": ["v1"],
                        "timeoutSeconds": 1,
                    }],
                }))
                .unwrap();
                Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
                    .create(&PostParams::default(), &webhook)
                    .await
                    .unwrap();
                // Admission picks up a new webhook within a moment: wait
                // until a volume create is refused.
                let volumes = self.volumes();
                eventually("volume creates fail", || async {
                    let probe: PersistentVolume = serde_json::from_value(serde_json::json!({
                        "metadata": {"name": "save-blocker-probe"},
                        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                 "hostPath": {"path": "/nonexistent"}},
                    }))
                    .unwrap();
                    match volumes.create(&PostParams::default(), &probe).await {
                        Err(kube::Error::Api(e)) if e.code == 500 => Some(()),
                        Ok(_) => {
                            let _ = volumes
                                .delete("save-blocker-probe", &DeleteParams::default())
                                .await;
                            None
                        }
                        Err(_) => None,
                    }
                })
                .await;
            }
        }
    }

    /// Undoes [`Cluster::fail_volume_saves`].
    async fn allow_volume_saves(&self) {
        match &self.api {
            TestApi::Simulated(sim) => sim.faults().clear(),
            TestApi::Real(_) => {
                use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
                Api::<ValidatingWebhookConfiguration>::all(self.client.clone())
                    .delete(SAVE_BLOCKER, &DeleteParams::default())
                    .await
                    .unwrap();
            }
        }
    }

    /// Freezes the API server: requests hang until [`Cluster::resume_api`].
    fn pause_api(&self) {
        match &self.api {
            TestApi::Simulated(sim) => sim.faults().pause(),
            TestApi::Real(cluster) => cluster.pause("kube-apiserver"),
        }
    }

    fn resume_api(&self) {
        match &self.api {
            TestApi::Simulated(sim) => sim.faults().resume(),
            TestApi::Real(cluster) => cluster.resume("kube-apiserver"),
        }
    }

    /// Deletes claim `data` of a `slow-create` class; the backend finishes
    /// after `attempts` calls (counted in the file `attempts`), and the
    /// storage made after the claim went is removed (the file `deleted`).
    async fn delete_claim_then_storage_is_removed(
        &self,
        deleted: &Path,
        attempts: &Path,
        calls: usize,
    ) {
        self.delete_claim("data").await;
        eventually(
            "the storage made after the claim went is removed",
            || async { deleted.exists().then_some(()) },
        )
        .await;
        assert_eq!(
            std::fs::read_to_string(attempts).unwrap(),
            "x".repeat(calls),
            "asked until it finished"
        );
        assert!(self.no_volumes().await);
    }

    fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), "default")
    }

    fn volumes(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    async fn class(&self, name: &str, params: &[(&str, &str)], extra: serde_json::Value) {
        let mut value = serde_json::json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": PROVISIONER,
            "parameters": params.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect::<serde_json::Map<_, _>>(),
        });
        if let (Some(obj), serde_json::Value::Object(extra)) = (value.as_object_mut(), extra) {
            obj.extend(extra);
        }
        let class: StorageClass = serde_json::from_value(value).unwrap();
        Api::<StorageClass>::all(self.client.clone())
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
    }

    /// A class served by the misbehave test guest doing `behavior`.
    async fn misbehave_class(&self, name: &str, behavior: &str) {
        self.class(
            name,
            &[("plugin", "misbehave"), ("behavior", behavior)],
            serde_json::json!({}),
        )
        .await;
    }

    /// A hostpath class writing into this cluster's volumes directory.
    async fn hostpath_class(&self, name: &str, extra: serde_json::Value) {
        let root = self.volumes_dir.path().display().to_string();
        self.class(name, &[("plugin", "hostpath"), ("hostRoot", &root)], extra)
            .await;
    }

    async fn claim(&self, name: &str, class: &str, extra_spec: serde_json::Value) {
        let mut spec = serde_json::json!({
            "storageClassName": class, "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        });
        if let (Some(obj), serde_json::Value::Object(extra)) = (spec.as_object_mut(), extra_spec) {
            obj.extend(extra);
        }
        let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec,
        }))
        .unwrap();
        self.claims()
            .create(&PostParams::default(), &claim)
            .await
            .unwrap();
    }

    async fn bound_volume(&self, claim: &str) -> PersistentVolume {
        let claims = self.claims();
        let name = eventually(&format!("claim {claim} is Bound"), || async {
            let c = claims.get(claim).await.ok()?;
            (c.status?.phase? == "Bound").then_some(c.spec?.volume_name?)
        })
        .await;
        self.volumes().get(&name).await.unwrap()
    }

    async fn delete_claim(&self, name: &str) {
        self.claims()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// Exactly `n` volumes exist, and `n` directories: nothing extra, nothing leaked.
    async fn one_volume_and_directory_each(&self, n: usize) {
        let volumes = self.volumes().list(&ListParams::default()).await.unwrap();
        assert_eq!(volumes.items.len(), n, "exactly one volume per claim");
        let dirs = std::fs::read_dir(self.volumes_dir.path()).unwrap().count();
        assert_eq!(dirs, n, "one directory per volume: nothing leaked");
    }

    /// Waits until the claim object is gone.
    async fn claim_gone(&self, name: &str) {
        let claims = self.claims();
        eventually(&format!("claim {name} is gone"), || async {
            claims.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
    }

    /// Waits until the volume object is gone.
    async fn volume_gone(&self, name: &str) {
        let volumes = self.volumes();
        eventually(&format!("volume {name} is deleted"), || async {
            volumes.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
    }

    async fn no_volumes(&self) -> bool {
        let list = self.volumes().list(&ListParams::default()).await.unwrap();
        list.items.is_empty()
    }

    /// A claim on class `async`, whose backend (misbehave's `slow-create`,
    /// with `extra` class parameters) answers in-background until asked
    /// `attempts` times. Returns the backend's files: its attempts so far,
    /// and the mark it leaves when the storage is deleted.
    async fn slowly_created_claim(
        &self,
        name: &str,
        attempts: usize,
        extra: &[(&str, &str)],
    ) -> (PathBuf, PathBuf) {
        let attempts = attempts.to_string();
        let mut params = vec![
            ("plugin", "misbehave"),
            ("behavior", "slow-create"),
            ("attempts", attempts.as_str()),
        ];
        params.extend_from_slice(extra);
        self.class("async", &params, serde_json::json!({})).await;
        self.claim(name, "async", serde_json::json!({})).await;
        let uid = self.claims().get(name).await.unwrap().uid().unwrap();
        let dir = self.volumes_dir.path();
        (
            dir.join(format!("pvc-{uid}.attempts")),
            dir.join(format!("pvc-{uid}.deleted")),
        )
    }

    async fn events_for(&self, name: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .collect()
    }

    async fn event(&self, claim: &str, reason: &str, containing: &str) -> Event {
        eventually(
            &format!("event {reason} on {claim} containing {containing:?}"),
            || async {
                self.events_for(claim).await.into_iter().find(|e| {
                    e.reason.as_deref() == Some(reason)
                        && e.message
                            .as_deref()
                            .unwrap_or_default()
                            .contains(containing)
                })
            },
        )
        .await
    }
}

/// A wasmprov host serving the plugins in `plugins_dir` (sandboxed to
/// `volumes`), tuned for tests: fast retries, short shutdown. Returns the
/// lifecycle to run; it stops when `shutdown` completes.
async fn host(
    client: Client,
    plugins_dir: &Path,
    volumes: &Path,
    metrics: Arc<Metrics>,
    tune: fn(&mut lifecycle::Config),
    shutdown: impl Future<Output = ()> + Send,
) -> impl Future<Output = ()> + Send {
    let policy = format!(
        "plugins:\n  hostpath:\n    preopens: [{{host: {dir}, guest: /volumes, mode: read-write}}]\n    \
         output: {{sources: [hostPath], paths: [{dir}]}}\n  \
         misbehave:\n    preopens: [{{host: {dir}, guest: /data, mode: read-write}}, {OK_PREOPEN}]\n    \
         output: {MISBEHAVE_OUTPUT}\n  \
         resizer:\n    preopens: [{{host: {dir}, guest: /data, mode: read-write}}, {OK_PREOPEN}]\n    \
         output: {MISBEHAVE_OUTPUT}\n  \
         quota-dir:\n    preopens: [{{host: {dir}, guest: /volumes, mode: read-write}}]\n    \
         output: {{sources: [hostPath], paths: [{dir}], annotationPrefixes: [quota-dir/]}}\n",
        dir = volumes.display()
    );
    ok_preopen();
    let policies = PolicySet::parse(&policy, Path::new("policy.yaml")).unwrap();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(workspace_root().join("target/test-compile-cache")),
        ..RuntimeConfig::default()
    })
    .unwrap();
    let registry =
        wasmprov::delivery::load_dir(Arc::new(runtime), plugins_dir, &policies, metrics.clone())
            .await
            .unwrap();
    let mut config = lifecycle::Config::new(PROVISIONER);
    config.retry_base = Duration::from_millis(100);
    config.max_retry = Duration::from_secs(1);
    config.save_attempts = 3;
    config.save_retry_interval = Duration::from_millis(100);
    config.shutdown_grace = Duration::from_secs(2);
    tune(&mut config);
    lifecycle::run(client, Arc::new(registry), config, metrics, shutdown)
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

fn host_path(pv: &PersistentVolume) -> PathBuf {
    PathBuf::from(&pv.spec.as_ref().unwrap().host_path.as_ref().unwrap().path)
}

fn hostpath() -> (&'static str, PathBuf) {
    ("hostpath", rust_plugin_path("hostpath"))
}

fn misbehave() -> (&'static str, PathBuf) {
    ("misbehave", rust_guest_path("misbehave"))
}

/// The resizable test guest that logs its `resize` calls.
fn resizer() -> (&'static str, PathBuf) {
    ("resizer", rust_guest_path("misbehave-resizer"))
}

async fn a_claim_gets_a_bound_volume_and_deleting_it_removes_the_storage(server: Server) {
    let c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    c.claim("data", "fast", serde_json::json!({})).await;

    let pv = c.bound_volume("data").await;
    let dir = host_path(&pv);
    assert!(dir.is_dir(), "the plugin created {}", dir.display());
    assert_eq!(dir.parent(), Some(c.volumes_dir.path()));
    let ann = pv.annotations();
    assert_eq!(ann["pv.kubernetes.io/provisioned-by"], PROVISIONER);
    assert_eq!(ann["wasmprov.io/plugin"], "hostpath");
    c.event("data", "ProvisioningSucceeded", &pv.name_any())
        .await;
    c.event("data", "Provisioning", "default/data").await;

    c.delete_claim("data").await;
    c.volume_gone(&pv.name_any()).await;
    assert!(!dir.exists(), "the plugin removed {}", dir.display());

    // What Prometheus scrapes: the Go library's names, and our plugin calls.
    let metrics = c.metrics.encode();
    for want in [
        "controller_persistentvolumeclaim_provision_total{class=\"fast\",source=\"\"} 1",
        "controller_persistentvolume_delete_total{class=\"fast\"} 1",
        "controller_persistentvolumeclaim_provision_duration_seconds_count{class=\"fast\",source=\"\"} 1",
        "wasmprov_plugin_calls_total{plugin=\"hostpath\",call=\"provision\",result=\"ok\"} 1",
        "wasmprov_plugin_calls_total{plugin=\"hostpath\",call=\"delete\",result=\"ok\"} 1",
    ] {
        assert!(metrics.contains(want), "missing {want} in:\n{metrics}");
    }
}

async fn a_retain_volume_and_its_storage_outlive_the_claim(server: Server) {
    let c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class("keep", serde_json::json!({"reclaimPolicy": "Retain"}))
        .await;
    c.claim("data", "keep", serde_json::json!({})).await;
    let pv = c.bound_volume("data").await;
    c.delete_claim("data").await;
    let volumes = c.volumes();
    let name = pv.name_any();
    eventually("the volume is Released", || async {
        let v = volumes.get(&name).await.ok()?;
        (v.status?.phase? == "Released").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        volumes.get_opt(&name).await.unwrap().is_some(),
        "Retain keeps the volume"
    );
    assert!(host_path(&pv).is_dir(), "Retain keeps the storage");
}

async fn one_host_serves_two_classes_with_two_plugins(server: Server) {
    let c = Cluster::start(server, &[hostpath(), misbehave()]).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    c.misbehave_class("odd", "ok").await;
    c.claim("a", "fast", serde_json::json!({})).await;
    c.claim("b", "odd", serde_json::json!({})).await;
    let a = c.bound_volume("a").await;
    let b = c.bound_volume("b").await;
    assert_eq!(a.annotations()["wasmprov.io/plugin"], "hostpath");
    assert_eq!(b.annotations()["wasmprov.io/plugin"], "misbehave");
    assert_eq!(
        b.annotations()["wasmprov.io/parameters"],
        "{}",
        "nothing of the class is recorded by default"
    );
}

async fn claims_of_other_provisioners_are_left_alone(server: Server) {
    let c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    let root = c.volumes_dir.path().display().to_string();
    c.class(
        "theirs",
        &[("plugin", "hostpath"), ("hostRoot", &root)],
        serde_json::json!({"provisioner": "ebs.csi.aws.com"}),
    )
    .await;
    c.claim("mine", "fast", serde_json::json!({})).await;
    c.claim("other", "theirs", serde_json::json!({})).await;
    c.bound_volume("mine").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let other = c.claims().get("other").await.unwrap();
    assert_eq!(other.status.unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(
        c.volumes()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert!(c
        .events_for("other")
        .await
        .iter()
        .all(|e| e.reason.as_deref() != Some("Provisioning")));
}

async fn an_unknown_plugin_is_reported_on_the_claim(server: Server) {
    let c = Cluster::start(server, &[hostpath()]).await;
    c.class("typo", &[("plugin", "hostpth")], serde_json::json!({}))
        .await;
    c.claim("data", "typo", serde_json::json!({})).await;
    let e = c
        .event("data", "ProvisioningFailed", "no plugin named \"hostpth\"")
        .await;
    let message = e.message.unwrap();
    assert!(
        message.contains("loaded: hostpath"),
        "says what is there: {message}"
    );
    assert_eq!(e.type_.as_deref(), Some("Warning"));
}

async fn a_volume_outside_the_plugins_output_policy_is_refused_and_its_storage_removed(
    server: Server,
) {
    let c = Cluster::start(server, &[hostpath()]).await;
    // A class author points hostRoot at /etc: the plugin makes its directory
    // in the volumes directory it was given, and reports /etc/pvc-… as the
    // path, which the policy (hostPath in the volumes directory) refuses.
    c.class(
        "escape",
        &[("plugin", "hostpath"), ("hostRoot", "/etc")],
        serde_json::json!({}),
    )
    .await;
    c.claim("data", "escape", serde_json::json!({})).await;
    let e = c
        .event("data", "ProvisioningFailed", "output policy refuses")
        .await;
    let message = e.message.unwrap();
    assert!(
        message.contains("hostPath.path \"/etc/pvc-") && message.contains("grant: output.paths"),
        "{message}"
    );
    assert!(
        message.contains("the storage it made was deleted again"),
        "{message}"
    );
    let volumes = c.volumes().list(&ListParams::default()).await.unwrap();
    assert!(volumes.items.is_empty(), "nothing saved: {volumes:?}");
    let left: Vec<_> = std::fs::read_dir(c.volumes_dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        left.is_empty(),
        "the plugin's directory was removed: {left:?}"
    );
}

async fn a_plugin_cannot_hand_a_claim_another_claims_directory(server: Server) {
    let c = Cluster::start(server, &[misbehave()]).await;
    c.misbehave_class("ok", "ok").await;
    c.claim("first", "ok", serde_json::json!({})).await;
    let first = c.bound_volume("first").await;
    let path = first.spec.unwrap().host_path.unwrap().path;
    // A plugin (compromised, or with a bug) answers the next claim with
    // the first claim's directory: under its grant, real, and not its own.
    let source = serde_json::json!({"hostPath": {"path": path}}).to_string();
    c.class(
        "steal",
        &[
            ("plugin", "misbehave"),
            ("behavior", "return"),
            ("source", &source),
        ],
        serde_json::json!({}),
    )
    .await;
    c.claim("second", "steal", serde_json::json!({})).await;
    let e = c
        .event("second", "ProvisioningFailed", "output policy refuses")
        .await;
    let message = e.message.unwrap();
    assert!(
        message.contains(&format!(
            "hostPath.path {path:?} does not name the volume pvc-"
        )),
        "{message}"
    );
    let volumes = c.volumes().list(&ListParams::default()).await.unwrap();
    assert_eq!(
        volumes.items.len(),
        1,
        "only the first claim's: {volumes:?}"
    );
}

async fn the_clean_up_of_a_refused_volume_cannot_swap_in_a_link(server: Server) {
    let c = Cluster::start(server, &[hostpath(), misbehave()]).await;
    // misbehave may return volumes under /tmp/ok only, but its preopen is
    // the directory where hostpath's volumes are: the policy refuses it
    // links there. It makes a real directory, returns it (refused: not in
    // /tmp/ok), and in the host's clean-up delete swaps it for a link to /.
    let root = c.volumes_dir.path().display().to_string();
    c.class(
        "swap",
        &[
            ("plugin", "misbehave"),
            ("behavior", "swap-link"),
            ("dir", "/data"),
            ("host-dir", &root),
        ],
        serde_json::json!({}),
    )
    .await;
    c.claim("data", "swap", serde_json::json!({})).await;
    let e = c
        .event("data", "ProvisioningFailed", "output policy refuses")
        .await;
    let message = e.message.unwrap();
    assert!(
        message.contains(": Operation not permitted")
            && message.contains(
                "deleting the storage it made failed, and is retried: symlink /data/pvc-"
            ),
        "{message}"
    );
    let links: Vec<_> = std::fs::read_dir(c.volumes_dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_symlink())
        .collect();
    assert!(
        links.is_empty(),
        "links in the volumes directory: {links:?}"
    );
    assert!(c.no_volumes().await);
}

/// The Go library's hostpath example (examples/hostpath-provisioner): a
/// directory `<pvDir>/<pv name>` served as a hostPath volume, its PV carrying
/// `pv.kubernetes.io/provisioned-by` and its own identity annotation.
const GO_PROVISIONER: &str = "example.com/hostpath";

async fn the_volumes_of_a_replaced_go_provisioner_are_adopted_and_reclaimed(server: Server) {
    let c = Cluster::start_with(server, &[hostpath()], |config| {
        config.names.additional = vec![GO_PROVISIONER.to_owned()];
        config
            .adopt_volumes
            .insert(GO_PROVISIONER.to_owned(), "hostpath-adopted".to_owned());
    })
    .await;
    let root = c.volumes_dir.path().display().to_string();
    // The operator recreated the Go provisioner's class with a plugin...
    c.class(
        "recreated",
        &[("plugin", "hostpath"), ("hostRoot", &root)],
        serde_json::json!({"provisioner": GO_PROVISIONER}),
    )
    .await;
    // ...and maps volumes whose class is gone to a class of this host.
    c.hostpath_class("hostpath-adopted", serde_json::json!({}))
        .await;
    // Volumes the Go provisioner made and saved before it was stopped: one
    // in the recreated class, one in a class deleted since.
    for (claim, class) in [("go-a", "recreated"), ("go-b", "example-hostpath")] {
        let pv_name = format!("pvc-{claim}");
        let dir = c.volumes_dir.path().join(&pv_name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("data"), "written through the Go provisioner").unwrap();
        let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv_name, "annotations": {
                "pv.kubernetes.io/provisioned-by": GO_PROVISIONER,
                "hostPathProvisionerIdentity": NODE}},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Delete", "storageClassName": class,
                "hostPath": {"path": dir.display().to_string()},
                "claimRef": {"namespace": "default", "name": claim}},
        }))
        .unwrap();
        c.volumes()
            .create(&PostParams::default(), &pv)
            .await
            .unwrap();
        c.claim(claim, class, serde_json::json!({"volumeName": pv_name}))
            .await;
        c.bound_volume(claim).await;
    }
    for claim in ["go-a", "go-b"] {
        c.claims()
            .delete(claim, &DeleteParams::default())
            .await
            .unwrap();
    }
    let volumes = c.volumes();
    eventually("the adopted volumes and their storage are gone", || async {
        let left = volumes.list(&ListParams::default()).await.ok()?.items;
        let dirs = std::fs::read_dir(c.volumes_dir.path()).ok()?.count();
        (left.is_empty() && dirs == 0).then_some(())
    })
    .await;
}

async fn a_claim_waits_for_its_missing_class_then_gets_provisioned(server: Server) {
    let c = Cluster::start(server, &[hostpath()]).await;
    c.claim("early", "later", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.hostpath_class("later", serde_json::json!({})).await;
    let pv = c.bound_volume("early").await;
    assert!(host_path(&pv).is_dir());
}

async fn wait_for_first_consumer_provisions_on_the_selected_node(server: Server) {
    let c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class(
        "local",
        serde_json::json!({"volumeBindingMode": "WaitForFirstConsumer", "parameters": {"plugin": "hostpath", "hostRoot": c.volumes_dir.path().display().to_string(), "nodeAffinity": "true"}}),
    )
    .await;
    c.claim("data", "local", serde_json::json!({})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        c.volumes()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "waits for the scheduler"
    );
    c.use_claim_in_a_pod("data").await;
    let pv = c.bound_volume("data").await;
    let affinity = serde_json::to_value(&pv.spec.as_ref().unwrap().node_affinity).unwrap();
    assert_eq!(
        affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"][0],
        NODE
    );
    if server == Server::Real {
        // The scheduler waited for the volume to bind, then bound the pod.
        assert_eq!(pod_node(&c.client, "default", "data").await, NODE);
    }
}

/// The plugin answers `reschedule` for the node the scheduler chose: the
/// host removes `volume.kubernetes.io/selected-node`, and the claim is
/// provisioned on the next node the scheduler tries.
async fn a_refused_node_is_given_up_for_another(server: Server) {
    const OTHER: &str = "worker-2";
    let c = Cluster::start(server, &[misbehave()]).await;
    c.class(
        "picky",
        &[
            ("plugin", "misbehave"),
            ("behavior", "reschedule"),
            ("refuse", NODE),
        ],
        serde_json::json!({"volumeBindingMode": "WaitForFirstConsumer"}),
    )
    .await;
    c.claim("data", "picky", serde_json::json!({})).await;
    // With one node, the first choice is that node. (The pod prefers the
    // other node once it exists, so the real scheduler's next choice is
    // that one, not a coin toss between two equal nodes.)
    match &c.api {
        TestApi::Simulated(sim) => sim.schedule_claim("default", "data", NODE).await.unwrap(),
        TestApi::Real(_) => {
            create_pod_preferring(&c.client, "default", "data", "data", Some(OTHER)).await
        }
    }
    c.event("data", "ProvisioningFailed", "this node cannot host it")
        .await;
    let claims = c.claims();
    if server == Server::Simulated {
        // (The real scheduler chooses again at once, so the gap is not
        // reliably seen there.)
        eventually("the selected-node annotation is removed", || async {
            let claim = claims.get("data").await.ok()?;
            (!claim
                .annotations()
                .contains_key("volume.kubernetes.io/selected-node"))
            .then_some(())
        })
        .await;
    }
    create_node(&c.client, OTHER).await;
    if server == Server::Simulated {
        c.sim()
            .schedule_claim("default", "data", OTHER)
            .await
            .unwrap();
    }
    c.bound_volume("data").await;
    let claim = claims.get("data").await.unwrap();
    assert_eq!(
        claim.annotations()["volume.kubernetes.io/selected-node"],
        OTHER
    );
    if server == Server::Real {
        assert_eq!(pod_node(&c.client, "default", "data").await, OTHER);
    }
}

async fn block_mode_is_refused_for_a_plugin_without_block_support(server: Server) {
    let c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    c.claim("raw", "fast", serde_json::json!({"volumeMode": "Block"}))
        .await;
    c.event(
        "raw",
        "ProvisioningFailed",
        "does not support volumeMode Block",
    )
    .await;
    assert!(c.no_volumes().await);
}

async fn a_volume_that_cannot_be_saved_is_cleaned_up_then_provisioned_when_the_api_recovers(
    server: Server,
) {
    let c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    c.fail_volume_saves().await;
    c.claim("data", "fast", serde_json::json!({})).await;
    c.event(
        "data",
        "ProvisioningFailed",
        "failed to save PersistentVolume",
    )
    .await;
    // The plugin's directory was deleted again: nothing leaked. (A retry
    // may already be making it again; between attempts it is gone.)
    eventually("the unsaved volume's directory is deleted", || async {
        std::fs::read_dir(c.volumes_dir.path())
            .unwrap()
            .next()
            .is_none()
            .then_some(())
    })
    .await;
    c.allow_volume_saves().await;
    let pv = c.bound_volume("data").await;
    assert!(host_path(&pv).is_dir());
}

async fn a_restarted_host_makes_exactly_one_volume_per_claim(server: Server) {
    let mut c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    for i in 0..5 {
        c.claim(&format!("c{i}"), "fast", serde_json::json!({}))
            .await;
    }
    // Stop the host while it works, then start another.
    tokio::time::sleep(Duration::from_millis(30)).await;
    c.stop_host().await;
    let dir = c._plugins_dir.path().to_owned();
    c.start_host(dir).await;
    for i in 0..5 {
        c.bound_volume(&format!("c{i}")).await;
    }
    let volumes = c
        .volumes()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(volumes.len(), 5, "one volume per claim");
    assert_eq!(
        std::fs::read_dir(c.volumes_dir.path()).unwrap().count(),
        5,
        "one directory per claim"
    );
}

/// Two replicas: only the lease holder provisions; when it stops, the other
/// takes over.
async fn with_leader_election_only_the_leader_provisions_and_a_standby_takes_over(server: Server) {
    use wasmprov::leader::{run_as_leader, LeaseConfig};

    let c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    // Replace the harness's host with two elected replicas.
    let mut c = c;
    c.stop_host().await;

    let replica = |identity: &str| {
        let client = c.client.clone();
        let mut lease = LeaseConfig::new("default", "wasmprov.io-host", identity);
        // Long enough that a loaded machine does not lapse it (the leader
        // hands over by releasing it, not by letting it expire).
        lease.lease_duration = Duration::from_secs(8);
        lease.renew_deadline = Duration::from_secs(6);
        lease.retry_period = Duration::from_millis(500);
        let metrics = Arc::new(Metrics::default());
        let plugins_dir = c._plugins_dir.path().to_owned();
        let volumes = c.volumes_dir.path().to_owned();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let m = metrics.clone();
        let task = tokio::spawn(async move {
            let work = host(
                client.clone(),
                &plugins_dir,
                &volumes,
                m.clone(),
                |_| {},
                async move {
                    let _ = rx.await;
                },
            )
            .await;
            let gauge = m.clone();
            let _ = run_as_leader(
                client,
                lease,
                move |l| {
                    gauge.leader.set(i64::from(l));
                },
                work,
            )
            .await;
        });
        (metrics, tx, task)
    };
    let (metrics_a, stop_a, task_a) = replica("replica-a");
    eventually("replica-a leads", || async {
        (metrics_a.leader.get() == 1).then_some(())
    })
    .await;
    let (metrics_b, stop_b, task_b) = replica("replica-b");

    c.claim("first", "fast", serde_json::json!({})).await;
    c.bound_volume("first").await;
    let provisioned = |m: &Metrics| {
        m.encode()
            .lines()
            .find_map(|l| {
                l.strip_prefix(
                    "controller_persistentvolumeclaim_provision_total{class=\"fast\",source=\"\"} ",
                )
            })
            .map_or(0, |n| n.parse::<u64>().unwrap())
    };
    assert_eq!(provisioned(&metrics_a), 1, "the leader provisioned");
    assert_eq!(provisioned(&metrics_b), 0, "the standby did not");
    assert_eq!(metrics_b.leader.get(), 0);

    // The leader stops (and releases the lease): the standby takes over.
    let _ = stop_a.send(());
    let _ = task_a.await;
    eventually("replica-b leads", || async {
        (metrics_b.leader.get() == 1).then_some(())
    })
    .await;
    c.claim("second", "fast", serde_json::json!({})).await;
    c.bound_volume("second").await;
    // At least: under heavy load a lease can lapse and come back, so the
    // standby may also have led for a moment (as with any Lease election).
    assert!(provisioned(&metrics_b) >= 1, "the new leader provisioned");
    let _ = stop_b.send(());
    let _ = task_b.await;
}

/// A flaky API server: watches drop, a fraction of writes fail with 500, 429
/// or 409. Every claim still ends up bound to exactly one volume, and no
/// storage leaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_claim_is_bound_exactly_once_despite_api_faults() {
    use kube_sim::{FailWith, FailureRule};

    let c = Cluster::start(Server::Simulated, &[hostpath()]).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    let faults = c.sim().faults();
    faults.close_every_nth_watch(3);
    for fail_with in [
        FailWith::Internal,
        FailWith::TooManyRequests,
        FailWith::Conflict,
    ] {
        faults.fail_requests(
            FailureRule::new(0.1, fail_with)
                .verbs(&["create", "update", "patch", "delete"])
                .resources(&["persistentvolumes"]),
        );
    }
    let n = 12;
    for i in 0..n {
        c.claim(&format!("c{i}"), "fast", serde_json::json!({}))
            .await;
    }
    let mut names = std::collections::BTreeSet::new();
    for i in 0..n {
        names.insert(c.bound_volume(&format!("c{i}")).await.name_any());
    }
    let stats = faults.stats();
    faults.clear();
    assert!(stats.failed_requests > 0, "faults were injected: {stats:?}");
    assert!(stats.closed_watches > 0, "watches were dropped: {stats:?}");
    assert_eq!(names.len(), n, "each claim has its own volume");
    c.one_volume_and_directory_each(n).await;
}

/// A claim deleted while its backend is still creating the storage: the host
/// keeps asking the plugin until the storage exists, then removes it.
async fn a_claim_deleted_while_its_storage_is_being_created_leaves_nothing_behind(server: Server) {
    let c = Cluster::start(server, &[misbehave()]).await;
    let (attempts, deleted) = c.slowly_created_claim("data", 4, &[]).await;
    eventually("the backend started creating", || async {
        attempts.exists().then_some(())
    })
    .await;
    c.event("data", "ProvisioningFailed", "still creating")
        .await;

    c.delete_claim_then_storage_is_removed(&deleted, &attempts, 4)
        .await;
}

/// Without `--claim-finalizer`: the claim went while its storage was being
/// created, and the first delete of what was made fails. As in the Go
/// library, the volume is saved, so it is reclaimed like any released one
/// (retried) instead of forgotten.
async fn a_claim_deleted_mid_create_whose_clean_up_fails_once_leaves_nothing_behind(
    server: Server,
) {
    // Slow claim retries, so that the claim is surely deleted before its own
    // controller gets the volume: the in-progress sweep gets it.
    let c = Cluster::start_with(server, &[misbehave()], |config| {
        config.retry_base = Duration::from_secs(2);
        config.max_retry = Duration::from_secs(2);
    })
    .await;
    let (attempts, deleted) = c
        .slowly_created_claim("data", 3, &[("delete-failures", "1")])
        .await;
    let pv_name = attempts.file_stem().unwrap().to_str().unwrap().to_owned();
    let file = |suffix: &str| attempts.with_extension(suffix);
    assert_eq!(file("deleted"), deleted);
    eventually("the backend started creating", || async {
        file("attempts").exists().then_some(())
    })
    .await;
    c.delete_claim("data").await;

    eventually_within(
        Duration::from_secs(30),
        "the storage made after the claim went is removed",
        || async { file("deleted").exists().then_some(()) },
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(file("attempts")).unwrap(),
        "xxx",
        "asked until it finished"
    );
    assert_eq!(
        std::fs::read_to_string(file("delete-attempts")).unwrap(),
        "xx",
        "the failed clean-up, then the reclaim of the saved volume"
    );
    let failed: Vec<Event> = c
        .events_for(&pv_name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("VolumeFailedDelete"))
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let message = failed[0].message.clone().unwrap();
    for want in [
        "default/data was deleted",
        "deliberate delete failure (1 of 1)",
        "saved",
    ] {
        assert!(message.contains(want), "{want:?} in {message}");
    }
    c.volume_gone(&pv_name).await;
    assert!(c.no_volumes().await);
}

/// By default a volume records none of its class's parameters (the Go
/// library records none either), yet `delete` gets them from the class;
/// once the class is gone, the failure says so and what to do.
async fn class_parameters_stay_on_the_class_and_reach_delete_from_it(server: Server) {
    let c = Cluster::start(server, &[misbehave()]).await;
    c.class(
        "echo",
        &[
            ("plugin", "misbehave"),
            ("behavior", "echo-parameters"),
            ("server", "10.0.0.5"),
            ("password", "hunter2"),
        ],
        serde_json::json!({}),
    )
    .await;
    c.claim("data", "echo", serde_json::json!({})).await;
    let pv = c.bound_volume("data").await;
    let name = pv.name_any();
    let ann = pv.annotations();
    assert_eq!(ann["misbehave.test/parameters"], "behavior,password,server");
    assert_eq!(ann["wasmprov.io/parameters"], "{}");
    let json = serde_json::to_string(&pv).unwrap();
    assert!(
        !json.contains("hunter2") && !json.contains("10.0.0.5"),
        "nothing of the class is on the volume: {json}"
    );

    // echo-parameters' delete fails, naming what it got: all, from the class.
    c.delete_claim("data").await;
    c.event(
        &name,
        "VolumeFailedDelete",
        "parameters: behavior,password,server",
    )
    .await;

    // What the volume records wins over the class: here a failing delete.
    let patch = serde_json::json!({"metadata": {"annotations": {"wasmprov.io/parameters": r#"{"behavior":"fail"}"#}}});
    c.volumes()
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let e = c
        .event(&name, "VolumeFailedDelete", "deliberate delete failure")
        .await;
    assert!(
        !e.message.unwrap().contains("StorageClass"),
        "the class is there"
    );
    Api::<StorageClass>::all(c.client.clone())
        .delete("echo", &DeleteParams::default())
        .await
        .unwrap();
    let e = c
        .event(
            &name,
            "VolumeFailedDelete",
            "StorageClass \"echo\" no longer exists",
        )
        .await;
    let message = e.message.unwrap();
    for want in [
        "recorded on the volume (behavior)",
        "plugins.misbehave.recordParameters",
        "misbehave: deliberate delete failure",
    ] {
        assert!(message.contains(want), "{want:?} in {message}");
    }
    assert!(c.volumes().get_opt(&name).await.unwrap().is_some());
}

/// With `--claim-finalizer`, a claim deleted while its backend is still
/// creating the storage stays (Terminating) until that storage is removed;
/// a claim provisioned normally carries the finalizer only until it is bound.
async fn with_the_claim_finalizer_a_deleted_claim_waits_until_its_storage_is_removed(
    server: Server,
) {
    let c = Cluster::start_with(server, &[hostpath(), misbehave()], |config| {
        config.claim_finalizer = true
    })
    .await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    c.claim("quick", "fast", serde_json::json!({})).await;
    let pv = c.bound_volume("quick").await;
    let claims = c.claims();
    eventually("the bound claim is released by the host", || async {
        let claim = claims.get("quick").await.unwrap();
        (!claim.finalizers().iter().any(|f| f == CLAIM_FINALIZER)).then_some(())
    })
    .await;
    c.delete_claim("quick").await;
    c.volume_gone(&pv.name_any()).await;

    let (attempts, deleted) = c.slowly_created_claim("data", 6, &[]).await;
    c.event("data", "ProvisioningFailed", "still creating")
        .await;
    assert!(c
        .claims()
        .get("data")
        .await
        .unwrap()
        .finalizers()
        .iter()
        .any(|f| f == CLAIM_FINALIZER));

    c.delete_claim("data").await;
    assert!(
        c.claims().get_opt("data").await.unwrap().is_some(),
        "held while the backend is creating"
    );
    let e = c
        .event("data", "Provisioning", "still creating its storage")
        .await;
    assert!(e.message.unwrap().contains("wasmprov.io/provisioning"));
    c.claim_gone("data").await;
    assert!(deleted.exists(), "its storage was removed first");
    assert_eq!(std::fs::read_to_string(&attempts).unwrap(), "xxxxxx");
    assert!(c.no_volumes().await);
}

/// A volume of the claim's that is already being deleted (reclaimed, its
/// object held by a finalizer) when a stale view of the claim comes to be
/// provisioned is not taken for the claim's own: the claim gets a volume
/// once the old one is gone, and no storage is left over. The Go library
/// counts it as saved and leaks the storage it made again
/// (kubernetes-csi/external-provisioner#1469). (Here the host sees the dying
/// volume in its cache and waits; a save that meets it because the cache
/// lags fails, which removes the storage just made.)
async fn a_volume_being_deleted_is_not_taken_for_the_claims_own(server: Server) {
    let mut c = Cluster::start(server, &[hostpath()]).await;
    c.stop_host().await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    c.claim("data", "fast", serde_json::json!({})).await;
    let uid = c.claims().get("data").await.unwrap().uid().unwrap();
    let old_name = format!("pvc-{uid}");
    // The old volume: this claim's uid, held by someone else's finalizer.
    // Its claimRef names no existing claim, so the binder leaves it alone.
    let old: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": old_name, "finalizers": ["test.example/hold"]},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "fast",
            "hostPath": {"path": "/nonexistent"},
            "claimRef": {"namespace": "default", "name": "reclaimed", "uid": uid}},
    }))
    .unwrap();
    c.volumes()
        .create(&PostParams::default(), &old)
        .await
        .unwrap();
    c.volumes()
        .delete(&old_name, &DeleteParams::default())
        .await
        .unwrap();

    c.start_host(c._plugins_dir.path().to_owned()).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        c.claims()
            .get("data")
            .await
            .unwrap()
            .spec
            .unwrap()
            .volume_name
            .is_none(),
        "not bound while the old volume is there"
    );

    let release = serde_json::json!({"metadata": {"finalizers": null}});
    c.volumes()
        .patch(
            &old_name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&release),
        )
        .await
        .unwrap();
    let pv = c.bound_volume("data").await;
    assert!(host_path(&pv).is_dir());
    c.one_volume_and_directory_each(1).await;
}

/// With `--add-finalizer`, deleting a volume object does not lose its
/// storage while bound, and the storage goes once the claim releases it.
async fn with_the_finalizer_a_deleted_bound_volume_keeps_its_storage_until_released(
    server: Server,
) {
    let c = Cluster::start_with(server, &[hostpath()], |config| config.add_finalizer = true).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    c.claim("data", "fast", serde_json::json!({})).await;
    let pv = c.bound_volume("data").await;
    assert!(pv
        .finalizers()
        .iter()
        .any(|f| f == "external-provisioner.volume.kubernetes.io/finalizer"));
    let dir = host_path(&pv);

    c.volumes()
        .delete(&pv.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(dir.is_dir(), "a bound volume's storage is kept");
    assert!(c.volumes().get_opt(&pv.name_any()).await.unwrap().is_some());

    c.delete_claim("data").await;
    c.volume_gone(&pv.name_any()).await;
    assert!(!dir.exists(), "the storage was deleted once released");
}

/// A plugin that cannot delete: the volume and its object stay, and the
/// failure is an event on the volume.
async fn a_failed_delete_keeps_the_volume_and_says_why(server: Server) {
    let c = Cluster::start(server, &[misbehave()]).await;
    // `fail` also fails provisioning, so bind through a class that works and
    // record `fail` as the parameters the volume was made with.
    c.class("ok", &[("plugin", "misbehave")], serde_json::json!({}))
        .await;
    c.claim("data", "ok", serde_json::json!({})).await;
    let pv = c.bound_volume("data").await;
    let patch = serde_json::json!({"metadata": {"annotations": {"wasmprov.io/parameters": r#"{"behavior":"fail"}"#}}});
    c.volumes()
        .patch(
            &pv.name_any(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    c.delete_claim("data").await;
    let name = pv.name_any();
    let e = eventually("a VolumeFailedDelete event", || async {
        Api::<Event>::all(c.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.involved_object.name.as_deref() == Some(name.as_str())
                    && e.reason.as_deref() == Some("VolumeFailedDelete")
            })
    })
    .await;
    assert!(e.message.unwrap().contains("deliberate delete failure"));
    assert!(
        c.volumes().get_opt(&name).await.unwrap().is_some(),
        "the volume is kept"
    );
}

/// `--kube-api-qps`/`--kube-api-burst`: however much work there is, the
/// host never sends more than `burst + qps × t` requests in its first t
/// seconds (counted by the API server; the test itself reads the store
/// directly so it sends none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_keeps_to_its_api_request_rate() {
    use wasmprov::lifecycle::{throttle, ApiLimits};

    let mut c = Cluster::start(Server::Simulated, &[hostpath()]).await;
    c.stop_host().await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    let n = 15;
    for i in 0..n {
        c.claim(&format!("c{i}"), "fast", serde_json::json!({}))
            .await;
    }
    let limits = ApiLimits {
        qps: 20.0,
        burst: 5,
    };
    let faults = c.sim().faults().clone();
    let before = faults.requests();
    let start = tokio::time::Instant::now();
    let client =
        throttle::client(kube::Config::new(c.sim().url().parse().unwrap()), limits).unwrap();
    let dir = c._plugins_dir.path().to_owned();
    c.start_host_with_client(dir, client).await;

    let registry = c.sim().registry().clone();
    let bound = |name: String| {
        registry
            .get(kube_sim::resources::PVC, "default", &name)
            .is_ok_and(|claim| claim["status"]["phase"] == "Bound")
    };
    let mut max_ratio = 0.0f64;
    let deadline = start + Duration::from_secs(60);
    loop {
        // Read the count before the clock: the bound holds at the later instant.
        let sent = (faults.requests() - before) as f64;
        // (+1e-6: floating-point rounding of the bucket's arithmetic)
        let allowed =
            f64::from(limits.burst) + f64::from(limits.qps) * start.elapsed().as_secs_f64() + 1e-6;
        assert!(
            sent <= allowed,
            "{sent} requests after {:?}; the limit allows {allowed}",
            start.elapsed()
        );
        max_ratio = max_ratio.max(sent / allowed);
        if (0..n).all(|i| bound(format!("c{i}"))) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "claims not bound within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sent = faults.requests() - before;
    // Each claim costs a few requests: the limit was what paced the host.
    assert!(sent >= 2 * n as u64, "only {sent} requests counted");
    assert!(
        start.elapsed().as_secs_f64()
            >= (sent as f64 - f64::from(limits.burst)) / f64::from(limits.qps),
        "{sent} requests in {:?}",
        start.elapsed()
    );
    eprintln!(
        "{sent} requests in {:?}; peak use of the allowance {:.0}%",
        start.elapsed(),
        max_ratio * 100.0
    );
}

/// `--failed-provision-threshold`: after that many failures the host stops
/// retrying, says so on the claim with how to retry, and tries once more when
/// the claim changes.
async fn a_claim_that_keeps_failing_is_given_up_with_an_event_saying_how_to_retry(server: Server) {
    // With the claim finalizer on: the host's own patches to the claim are
    // not changes that earn another try.
    let c = Cluster::start_with(server, &[misbehave()], |config| {
        config.failed_provision_threshold = 3;
        config.claim_finalizer = true;
    })
    .await;
    c.misbehave_class("broken", "fail").await;
    c.claim("data", "broken", serde_json::json!({})).await;
    let e = c
        .event(
            "data",
            "ProvisioningFailed",
            "Gave up provisioning after 3 failed attempts",
        )
        .await;
    let message = e.message.unwrap();
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    for want in [
        "--failed-provision-threshold=3",
        "deliberate failure",
        "kubectl annotate pvc data -n default",
        "recreated",
    ] {
        assert!(message.contains(want), "{want:?} in {message}");
    }
    assert_eq!(plugin_calls(&c.metrics, "misbehave", "provision"), 3);
    // Retries came every 100-400 ms; none come now.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        plugin_calls(&c.metrics, "misbehave", "provision"),
        3,
        "no retries after giving up"
    );

    // What the event says to do: a change to the claim gets one more try.
    let patch = serde_json::json!({"metadata": {"annotations": {"wasmprov.io/retry": "1"}}});
    c.claims()
        .patch(
            "data",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    c.event(
        "data",
        "ProvisioningFailed",
        "Gave up provisioning after 4 failed attempts",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(plugin_calls(&c.metrics, "misbehave", "provision"), 4);
}

/// `--failed-delete-threshold`: the same for a volume whose storage cannot
/// be deleted.
async fn a_volume_that_keeps_failing_to_delete_is_given_up_with_an_event(server: Server) {
    let c = Cluster::start_with(server, &[misbehave()], |config| {
        config.failed_delete_threshold = 2;
    })
    .await;
    c.class("ok", &[("plugin", "misbehave")], serde_json::json!({}))
        .await;
    c.claim("data", "ok", serde_json::json!({})).await;
    let pv = c.bound_volume("data").await;
    let name = pv.name_any();
    let patch = serde_json::json!({"metadata": {"annotations": {"wasmprov.io/parameters": r#"{"behavior":"fail"}"#}}});
    c.volumes()
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    c.delete_claim("data").await;
    let e = eventually("a give-up event on the volume", || async {
        Api::<Event>::all(c.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|e| {
                e.involved_object.name.as_deref() == Some(name.as_str())
                    && e.reason.as_deref() == Some("VolumeFailedDelete")
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.contains("Gave up deleting"))
            })
    })
    .await;
    let message = e.message.unwrap();
    for want in [
        "after 2 failed attempts",
        "--failed-delete-threshold=2",
        "deliberate delete failure",
        &format!("kubectl annotate pv {name}"),
    ] {
        assert!(message.contains(want), "{want:?} in {message}");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(plugin_calls(&c.metrics, "misbehave", "delete"), 2);
    assert!(c.volumes().get_opt(&name).await.unwrap().is_some());
}

/// `wasmprov run` as a child process against the API server, so a test can
/// kill it for real (SIGKILL: no graceful shutdown, no cleanup).
struct HostProcess {
    child: std::process::Child,
    log: PathBuf,
}

impl HostProcess {
    fn spawn(c: &Cluster, work: &Path, name: &str) -> Self {
        Self::spawn_with(c, work, name, &[])
    }

    /// `wasmprov run` with more flags.
    fn spawn_with(c: &Cluster, work: &Path, name: &str, flags: &[&str]) -> Self {
        let kubeconfig = work.join("kubeconfig");
        std::fs::write(&kubeconfig, c.api.kubeconfig()).unwrap();
        let policy = work.join("policy.yaml");
        std::fs::write(
            &policy,
            format!(
                "plugins:\n  hostpath:\n    preopens: [{{host: {dir}, guest: /volumes, mode: read-write}}]\n    \
                 output: {{sources: [hostPath], paths: [{dir}]}}\n  \
                 misbehave:\n    preopens: [{{host: {dir}, guest: /data, mode: read-write}}, {OK_PREOPEN}]\n    \
                 output: {MISBEHAVE_OUTPUT}\n",
                dir = c.volumes_dir.path().display()
            ),
        )
        .unwrap();
        ok_preopen();
        let log = work.join(format!("{name}.log"));
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_wasmprov"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--plugins-dir")
            .arg(c._plugins_dir.path())
            .arg("--policy")
            .arg(&policy)
            .arg("--cache-dir")
            .arg(workspace_root().join("target/test-compile-cache"))
            .args(
                ["--leader-election=false"]
                    .into_iter()
                    .filter(|_| !flags.iter().any(|f| f.starts_with("--leader-election="))),
            )
            .args(["--metrics-address", "127.0.0.1:0"])
            .args(["--kube-api-qps", "50", "--kube-api-burst", "20"])
            .args(flags)
            // Its identity in the leader Lease and in the events it reports.
            .env("POD_NAME", name)
            .env("RUST_LOG", "info")
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(work.join(format!("{name}.err"))).unwrap())
            .spawn()
            .expect("start wasmprov run");
        HostProcess { child, log }
    }

    /// SIGKILL, like the OOM killer or a node failure.
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        eprintln!("killed host; its log: {}", self.log.display());
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `wasmprov run` while volumes cannot be saved, and kills it (SIGKILL)
/// once the plugin has made storage for some claims and no volume is saved.
/// Returns how many directories the plugin had made.
async fn kill_mid_provision(c: &Cluster, work: &Path, flags: &[&str]) -> usize {
    let dirs = || std::fs::read_dir(c.volumes_dir.path()).unwrap().count();
    // Volumes cannot be saved: the host keeps retrying the save (over about
    // 1.5 s) while the plugin's directories exist.
    c.fail_volume_saves().await;
    let host = HostProcess::spawn_with(c, work, "first", flags);
    let made = loop {
        eventually("the plugin made a directory", || async {
            (dirs() > 0).then_some(())
        })
        .await;
        // Freeze the API server: the host cannot finish (or give up on) a
        // save any more. A cleanup already under way takes milliseconds.
        c.pause_api();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let made = dirs();
        if made > 0 {
            break made;
        }
        c.resume_api(); // it had just cleaned up: try again
    };
    host.kill();
    // Requests the dead host left in flight fail like the ones before.
    c.resume_api();
    assert!(
        c.volumes()
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty(),
        "no volume was saved before the kill"
    );
    eprintln!("killed with {made} directories made and no volume saved");
    c.allow_volume_saves().await;
    made
}

/// The host is killed while the plugin has made storage whose volume is not
/// saved yet; the restarted host provisions the same `pvc-<uid>` volumes
/// again (the plugin finds its directories), so every claim ends with
/// exactly one volume and no directory is left over.
async fn a_host_killed_mid_provision_and_restarted_leaves_one_volume_per_claim_and_no_leak(
    server: Server,
) {
    let mut c = Cluster::start(server, &[hostpath()]).await;
    c.stop_host().await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    let work = tempfile::tempdir().unwrap();
    let n = 6;
    for i in 0..n {
        c.claim(&format!("c{i}"), "fast", serde_json::json!({}))
            .await;
    }
    kill_mid_provision(&c, work.path(), &[]).await;

    let _host = HostProcess::spawn(&c, work.path(), "second");
    let mut names = std::collections::BTreeSet::new();
    for i in 0..n {
        let claim = c.claims().get(&format!("c{i}")).await.unwrap();
        let pv = c.bound_volume(&format!("c{i}")).await;
        assert_eq!(pv.name_any(), format!("pvc-{}", claim.uid().unwrap()));
        assert!(host_path(&pv).is_dir());
        names.insert(pv.name_any());
    }
    assert_eq!(names.len(), n, "each claim has its own volume");
    c.one_volume_and_directory_each(n).await;
}

/// The leak the Go library still has (kubernetes-csi/external-provisioner
/// #486), closed by `--claim-finalizer`: the claim is deleted while the host
/// is down after its plugin made the storage but before the volume was
/// saved. The finalizer keeps the claim (Terminating) so the restarted host
/// finds it, removes the storage, and only then lets the claim go.
async fn with_the_claim_finalizer_a_claim_deleted_while_the_host_is_down_leaves_no_storage(
    server: Server,
) {
    let mut c = Cluster::start(server, &[hostpath()]).await;
    c.stop_host().await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    let work = tempfile::tempdir().unwrap();
    c.claim("data", "fast", serde_json::json!({})).await;
    kill_mid_provision(&c, work.path(), &["--claim-finalizer"]).await;
    c.delete_claim("data").await;
    let held = c.claims().get("data").await.unwrap();
    assert!(
        held.metadata.deletion_timestamp.is_some()
            && held.finalizers().iter().any(|f| f == CLAIM_FINALIZER),
        "the claim waits for the host: {:?}",
        held.metadata
    );

    let _host = HostProcess::spawn_with(&c, work.path(), "second", &["--claim-finalizer"]);
    let dirs = || std::fs::read_dir(c.volumes_dir.path()).unwrap().count();
    c.claim_gone("data").await;
    assert_eq!(
        dirs(),
        0,
        "the storage made for the deleted claim is removed"
    );
    assert!(c.no_volumes().await);
}

/// The replica that reported `reason` on claim `claim`.
async fn reported_by(c: &Cluster, claim: &str, reason: &str) -> String {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(c.client.clone(), "default");
    eventually(&format!("a {reason} event on claim {claim}"), || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(claim)
            })?
            .reporting_instance
    })
    .await
}

/// Two `wasmprov run` processes elect a leader through the Lease; only the
/// leader provisions. Killed (SIGKILL: it cannot release the Lease), the
/// leader is replaced by the standby once the Lease expires.
async fn a_standby_process_takes_over_when_the_leader_process_is_killed(server: Server) {
    let mut c = Cluster::start(server, &[hostpath()]).await;
    c.stop_host().await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    let work = tempfile::tempdir().unwrap();
    let election = [
        "--leader-election=true",
        "--leader-election-namespace=default",
        "--leader-election-lease-duration=4s",
        // Room for a slow renewal on a loaded machine: a leader stops at
        // its renew deadline even when the renewal eventually succeeds.
        "--leader-election-renew-deadline=3s",
        "--leader-election-retry-period=500ms",
    ];
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(c.client.clone(), "default");
    let holder = || async {
        leases
            .get_opt("wasmprov.io-host")
            .await
            .ok()??
            .spec?
            .holder_identity
    };
    let first = HostProcess::spawn_with(&c, work.path(), "replica-a", &election);
    eventually("replica-a holds the Lease", || async {
        (holder().await? == "replica-a").then_some(())
    })
    .await;
    let _standby = HostProcess::spawn_with(&c, work.path(), "replica-b", &election);

    c.claim("before", "fast", serde_json::json!({})).await;
    c.bound_volume("before").await;
    assert_eq!(
        reported_by(&c, "before", "ProvisioningSucceeded").await,
        "replica-a"
    );

    first.kill();
    let killed = tokio::time::Instant::now();
    eventually("replica-b holds the Lease", || async {
        (holder().await? == "replica-b").then_some(())
    })
    .await;
    eprintln!("replica-b took over {:?} after the kill", killed.elapsed());
    c.claim("after", "fast", serde_json::json!({})).await;
    c.bound_volume("after").await;
    assert_eq!(
        reported_by(&c, "after", "ProvisioningSucceeded").await,
        "replica-b"
    );
    c.one_volume_and_directory_each(2).await;
}

/// The leader process's API server freezes (requests hang; no error ever
/// comes back). It must stop at its renew deadline, here by exiting, before
/// a standby could take the Lease: no earlier than its duration after the
/// last renewal, which was at most a retry period before the freeze.
async fn a_leader_process_exits_when_the_api_freezes(server: Server) {
    let mut c = Cluster::start(server, &[hostpath()]).await;
    c.stop_host().await;
    let work = tempfile::tempdir().unwrap();
    let (lease, retry) = (Duration::from_secs(4), Duration::from_millis(500));
    let election = [
        "--leader-election=true",
        "--leader-election-namespace=default",
        "--leader-election-lease-duration=4s",
        "--leader-election-renew-deadline=2s",
        "--leader-election-retry-period=500ms",
    ];
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(c.client.clone(), "default");
    let mut leader = HostProcess::spawn_with(&c, work.path(), "replica-a", &election);
    eventually("replica-a holds the Lease", || async {
        let holder = leases
            .get_opt("wasmprov.io-host")
            .await
            .ok()??
            .spec?
            .holder_identity;
        (holder? == "replica-a").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await; // a few renewals
    /// Thaws the API server however the test ends.
    struct Thaw<'a>(&'a Cluster);
    impl Drop for Thaw<'_> {
        fn drop(&mut self) {
            self.0.resume_api();
        }
    }
    c.pause_api();
    let thaw = Thaw(&c);
    let frozen = tokio::time::Instant::now();
    // Without a bound on the renewal it waits for the API server for ever
    // (or --kube-api-timeout, 30 s).
    let exited = loop {
        if let Some(status) = leader.child.try_wait().unwrap() {
            break Some(status);
        }
        if frozen.elapsed() > lease + Duration::from_secs(2) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let took = frozen.elapsed();
    drop(thaw);
    let stderr = std::fs::read_to_string(work.path().join("replica-a.err")).unwrap();
    let status =
        exited.unwrap_or_else(|| panic!("still running {took:?} after the API server froze"));
    eprintln!("the leader exited {took:?} after the API server froze ({status})");
    assert!(!status.success());
    assert!(stderr.contains("lost the leader lease"), "{stderr}");
    assert!(
        took < lease - retry,
        "exited {took:?} after the freeze: a standby could have taken the Lease by then"
    );
}

/// With `--claim-finalizer` each attempt patches the claim twice (the
/// finalizer on, then off), and each patch is a watch event. Those must not
/// cut the backoff short: at a backoff of 1 s, doubling, a failing
/// claim is tried at 0, 1 and 3 s, so at most 3 times in its first 6 s; an
/// invalid-argument claim is retried slowly (5 minutes), so once.
async fn the_hosts_own_claim_writes_do_not_cut_a_backoff_short(server: Server) {
    let misbehaving = rust_guest_path("misbehave");
    let c = Cluster::start_with(
        server,
        &[("failing", misbehaving.clone()), ("invalid", misbehaving)],
        |config| {
            config.claim_finalizer = true;
            config.retry_base = Duration::from_secs(1);
            config.max_retry = Duration::from_secs(300);
        },
    )
    .await;
    c.class(
        "failing",
        &[("plugin", "failing"), ("behavior", "fail")],
        serde_json::json!({}),
    )
    .await;
    c.class(
        "invalid",
        &[("plugin", "invalid"), ("behavior", "invalid-argument")],
        serde_json::json!({}),
    )
    .await;
    c.claim("fails", "failing", serde_json::json!({})).await;
    c.claim("refused", "invalid", serde_json::json!({})).await;
    // The window starts at the failing claim's first attempt (the other
    // claim's may come later on a loaded machine).
    eventually("the failing claim was tried", || async {
        (plugin_calls(&c.metrics, "failing", "provision") >= 1).then_some(())
    })
    .await;
    let first = tokio::time::Instant::now();
    // On the simulator, the writes to claims and events are counted too.
    let writes = || match &c.api {
        TestApi::Simulated(sim) => sim
            .requests()
            .iter()
            .filter(|r| {
                matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete")
                    && matches!(r.resource.as_str(), "persistentvolumeclaims" | "events")
            })
            .count(),
        TestApi::Real(_) => 0,
    };
    let (writes_before, calls_before) = (
        writes(),
        plugin_calls(&c.metrics, "failing", "provision")
            + plugin_calls(&c.metrics, "invalid", "provision"),
    );
    eventually("the refused claim was tried", || async {
        (plugin_calls(&c.metrics, "invalid", "provision") >= 1).then_some(())
    })
    .await;
    tokio::time::sleep_until(first + Duration::from_secs(6)).await;
    let failing = plugin_calls(&c.metrics, "failing", "provision");
    let invalid = plugin_calls(&c.metrics, "invalid", "provision");
    assert!(
        (2..=3).contains(&failing),
        "a failing claim is tried at 0, 1 and 3 s: {failing} calls in its first 6 s"
    );
    assert_eq!(invalid, 1, "an invalid-argument claim waits minutes");
    // Each attempt writes the claim twice (its finalizer on and off) and
    // two events (Provisioning, ProvisioningFailed): nothing more. The
    // window opened at the first attempt's plugin call, so its last two
    // writes fall in it too.
    let calls = failing + invalid - calls_before;
    let written = writes() - writes_before;
    assert!(
        written <= 4 * calls as usize + 2,
        "{written} writes to claims and events for {calls} attempts"
    );
    // The finalizer came off after each attempt: no claim is left held.
    for name in ["fails", "refused"] {
        let claim = c.claims().get(name).await.unwrap();
        assert!(
            !claim.finalizers().iter().any(|f| f == CLAIM_FINALIZER),
            "{name}: {:?}",
            claim.finalizers()
        );
    }
}

/// An invalid-argument answer is a failure like any other for
/// `--failed-provision-threshold`: at 1, the host gives up at once and says so.
async fn an_invalid_argument_counts_towards_giving_up(server: Server) {
    let c = Cluster::start_with(server, &[misbehave()], |config| {
        config.failed_provision_threshold = 1;
    })
    .await;
    c.misbehave_class("invalid", "invalid-argument").await;
    c.claim("refused", "invalid", serde_json::json!({})).await;
    c.event(
        "refused",
        "ProvisioningFailed",
        "Gave up provisioning after 1 failed attempt",
    )
    .await;
}

/// Claims that are not ours cost no API request: a static claim
/// (`storageClassName: manual`, bound to a volume an admin made) and a
/// claim of a class that does not exist and that the PV controller has
/// handed to no provisioner. The Go library looks at the claim's
/// storage-provisioner annotation before anything else; so does the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_that_are_not_ours_cost_no_api_request() {
    let mut c = Cluster::start(Server::Simulated, &[hostpath()]).await;
    c.stop_host().await;
    let host_token = "the-host";
    let client = c.client_with_token(host_token).await;
    let static_pv: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "admin-made"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": "manual", "hostPath": {"path": "/srv/data"}},
    }))
    .unwrap();
    c.volumes()
        .create(&PostParams::default(), &static_pv)
        .await
        .unwrap();
    c.claim("static", "manual", serde_json::json!({})).await;
    c.claim("nowhere", "missing", serde_json::json!({})).await;
    c.bound_volume("static").await;

    let dir = c._plugins_dir.path().to_owned();
    c.start_host_with_client(dir, client).await;
    // The host lists and watches; then a few reconciles of both claims.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let touched: Vec<String> = c
        .sim()
        .requests()
        .into_iter()
        .filter(|r| r.user == host_token && !matches!(r.verb.as_str(), "list" | "watch"))
        .map(|r| format!("{} {} {}/{}", r.verb, r.resource, r.namespace, r.name))
        .collect();
    assert!(
        touched.is_empty(),
        "requests for claims that are not ours: {touched:?}"
    );
}

/// `volume.kubernetes.io/selected-node: ""` is no node: a
/// WaitForFirstConsumer claim still waits for the scheduler, instead of
/// being provisioned with no node.
async fn an_empty_selected_node_is_no_node(server: Server) {
    let c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class(
        "local",
        serde_json::json!({"volumeBindingMode": "WaitForFirstConsumer", "parameters": {"plugin": "hostpath", "hostRoot": c.volumes_dir.path().display().to_string(), "nodeAffinity": "true"}}),
    )
    .await;
    c.claim("data", "local", serde_json::json!({})).await;
    let empty = serde_json::json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": ""}}});
    c.claims()
        .patch(
            "data",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&empty),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        plugin_calls(&c.metrics, "hostpath", "provision"),
        0,
        "the plugin is not asked without a node"
    );
    assert!(c.no_volumes().await, "nothing provisioned without a node");
    // A node selected for real (the real scheduler does not replace an
    // annotation that is there, even empty: the test acts for it).
    let chosen = serde_json::json!({"metadata": {"annotations": {"volume.kubernetes.io/selected-node": NODE}}});
    c.claims()
        .patch(
            "data",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&chosen),
        )
        .await
        .unwrap();
    let pv = c.bound_volume("data").await;
    assert!(serde_json::to_string(&pv.spec.unwrap().node_affinity)
        .unwrap()
        .contains(NODE));
}

/// A plugin answering `reschedule` for a claim no scheduler placed (an
/// Immediate class) has nobody to ask for another node: it is a failure,
/// reported and retried with backoff, not a claim left waiting for ever.
async fn reschedule_without_a_selected_node_is_retried_with_backoff(server: Server) {
    let c = Cluster::start(server, &[misbehave()]).await;
    c.misbehave_class("picky", "reschedule").await;
    c.claim("data", "picky", serde_json::json!({})).await;
    c.event("data", "ProvisioningFailed", "no selected node to give up")
        .await;
    eventually("the claim is tried again", || async {
        (plugin_calls(&c.metrics, "misbehave", "provision") >= 3).then_some(())
    })
    .await;
}

/// The scheduler chose another node while the plugin was refusing the
/// first: the host's removal of the refused node tests that it is still the
/// one selected, so the new choice stands and is provisioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_chosen_during_a_refusal_is_kept() {
    const OTHER: &str = "worker-2";
    let c = Cluster::start(Server::Simulated, &[misbehave()]).await;
    create_node(&c.client, OTHER).await;
    c.class(
        "picky",
        &[
            ("plugin", "misbehave"),
            ("behavior", "reschedule"),
            ("refuse", NODE),
            ("spin-ms", "1500"),
        ],
        serde_json::json!({"volumeBindingMode": "WaitForFirstConsumer"}),
    )
    .await;
    c.claim("data", "picky", serde_json::json!({})).await;
    c.sim()
        .schedule_claim("default", "data", NODE)
        .await
        .unwrap();
    // While the plugin thinks about NODE (1.5 s), the scheduler moves on.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        plugin_calls(&c.metrics, "misbehave", "provision"),
        0,
        "the plugin is still answering about the first node"
    );
    c.sim()
        .schedule_claim("default", "data", OTHER)
        .await
        .unwrap();
    c.event("data", "ProvisioningFailed", "this node cannot host it")
        .await;
    c.bound_volume("data").await;
    let claim = c.claims().get("data").await.unwrap();
    assert_eq!(
        claim.annotations()["volume.kubernetes.io/selected-node"],
        OTHER
    );
}

const PV_FINALIZER: &str = "external-provisioner.volume.kubernetes.io/finalizer";

async fn volume_finalized(c: &Cluster, name: &str, want: bool) {
    let volumes = c.volumes();
    eventually(
        &format!(
            "volume {name} {} our finalizer",
            if want { "has" } else { "lacks" }
        ),
        || async {
            let pv = volumes.get(name).await.ok()?;
            (pv.finalizers().iter().any(|f| f == PV_FINALIZER) == want).then_some(())
        },
    )
    .await;
}

/// With `--add-finalizer`, a Retain volume carries no finalizer of ours (it
/// has no storage for us to reclaim), and one an older host left on it is
/// removed: a Released Retain volume that an admin deletes goes, instead of
/// staying Terminating for ever.
async fn a_released_retain_volume_an_admin_deletes_goes(server: Server) {
    let c = Cluster::start_with(server, &[hostpath()], |config| config.add_finalizer = true).await;
    c.hostpath_class("keep", serde_json::json!({"reclaimPolicy": "Retain"}))
        .await;
    c.claim("data", "keep", serde_json::json!({})).await;
    let pv = c.bound_volume("data").await;
    let name = pv.name_any();
    assert!(
        !pv.finalizers().iter().any(|f| f == PV_FINALIZER),
        "{:?}",
        pv.finalizers()
    );
    // As an older host made it: with our finalizer.
    let held = serde_json::json!({"metadata": {"finalizers": [PV_FINALIZER, "kubernetes.io/pv-protection"]}});
    c.volumes()
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&held),
        )
        .await
        .unwrap();
    volume_finalized(&c, &name, false).await;
    c.delete_claim("data").await;
    let volumes = c.volumes();
    eventually("the volume is Released", || async {
        let v = volumes.get(&name).await.ok()?;
        (v.status?.phase? == "Released").then_some(())
    })
    .await;
    volumes
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();
    c.volume_gone(&name).await;
    assert!(host_path(&pv).is_dir(), "Retain keeps the storage");
}

/// `--add-finalizer` is applied to volumes made before it was turned on,
/// and taken off them when it is turned off, as the Go library does on
/// every sync.
async fn the_volume_finalizer_follows_the_flag_on_existing_volumes(server: Server) {
    let mut c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    c.claim("data", "fast", serde_json::json!({})).await;
    let name = c.bound_volume("data").await.name_any();
    volume_finalized(&c, &name, false).await;

    let dir = c._plugins_dir.path().to_owned();
    c.stop_host().await;
    c.tune = |config| config.add_finalizer = true;
    c.start_host(dir.clone()).await;
    volume_finalized(&c, &name, true).await;

    c.stop_host().await;
    c.tune = |config| config.add_finalizer = false;
    c.start_host(dir).await;
    volume_finalized(&c, &name, false).await;
}

/// Undone finalizer writes after which the host stops (the detector's limit).
const FINALIZER_UNDO_LIMIT: usize = 3;

/// A replaced provisioner still running for our name with
/// `--add-finalizer=false` removes the finalizer the host adds, and the
/// host adds it back, each woken by the other's write, for ever. The host
/// notices after a few rounds, stops, and says so on the volume.
async fn a_provisioner_undoing_the_volume_finalizer_is_detected_and_left_alone(server: Server) {
    let c = Cluster::start_with(server, &[hostpath()], |config| config.add_finalizer = true).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    c.claim("data", "fast", serde_json::json!({})).await;
    let name = c.bound_volume("data").await.name_any();
    volume_finalized(&c, &name, true).await;
    a_fight_over_the_finalizer_stops(&c, &name, false).await;
}

/// The mirror case: the host runs without `--add-finalizer` and the other
/// provisioner keeps adding the finalizer back.
async fn a_provisioner_adding_back_the_volume_finalizer_is_detected_and_left_alone(server: Server) {
    let c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    c.claim("data", "fast", serde_json::json!({})).await;
    let name = c.bound_volume("data").await.name_any();
    volume_finalized(&c, &name, false).await;
    a_fight_over_the_finalizer_stops(&c, &name, true).await;
}

/// Runs a peer that keeps volume `name` with (`peer_wants`) or without our
/// finalizer, looking every 50 ms, and checks that the host gives up after
/// a few of its writes were undone, says so once, and writes no more.
async fn a_fight_over_the_finalizer_stops(c: &Cluster, name: &str, peer_wants: bool) {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let undos = Arc::new(AtomicUsize::new(0));
    let _peer = AbortOnDrop(tokio::spawn({
        let volumes = c.volumes();
        let name = name.to_owned();
        let undos = undos.clone();
        async move {
            loop {
                if let Ok(pv) = volumes.get(&name).await {
                    let mut finalizers = pv.finalizers().to_vec();
                    let index = finalizers.iter().position(|f| f == PV_FINALIZER);
                    let change = match (index, peer_wants) {
                        (Some(i), false) => Some(finalizers.remove(i)),
                        (None, true) => {
                            finalizers.push(PV_FINALIZER.to_owned());
                            Some(PV_FINALIZER.to_owned())
                        }
                        _ => None,
                    };
                    if change.is_some() {
                        // Only on top of what was read: a lost race is no undo.
                        let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
                            {"op": "test", "path": "/metadata/resourceVersion", "value": pv.resource_version()},
                            {"op": "add", "path": "/metadata/finalizers", "value": finalizers},
                        ]))
                        .unwrap();
                        let saved = volumes
                            .patch(
                                &name,
                                &kube::api::PatchParams::default(),
                                &kube::api::Patch::Json::<()>(patch),
                            )
                            .await;
                        if saved.is_ok() {
                            undos.fetch_add(1, SeqCst);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }));
    let undoing = if peer_wants { "adding" } else { "removing" };
    let wanted = format!("keeps {undoing} {PV_FINALIZER}");
    let event = tokio::time::timeout(
        Duration::from_secs(15),
        c.event(name, "FinalizerConflict", &wanted),
    )
    .await
    .unwrap_or_else(|_| {
        panic!(
            "no FinalizerConflict event in 15 s; the peer undid {} host writes meanwhile",
            undos.load(SeqCst)
        )
    });
    let message = event.message.unwrap();
    for part in [
        &format!("undid this host's last {FINALIZER_UNDO_LIMIT} writes"),
        "a replaced provisioner still running for wasmprov.io/host",
        "stop the other provisioner or make the flags agree, then restart this host",
    ] {
        assert!(message.contains(part), "{message}");
    }
    // The peer's first change, then one undo of each host write (the host
    // and the peer take turns: neither writes what is already there).
    let undone = undos.load(SeqCst);
    assert_eq!(
        undone,
        FINALIZER_UNDO_LIMIT + 1,
        "peer writes before the host stopped"
    );
    let version = c.volumes().get(name).await.unwrap().resource_version();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        undos.load(SeqCst),
        undone,
        "the host wrote the finalizer again"
    );
    assert_eq!(
        c.volumes().get(name).await.unwrap().resource_version(),
        version,
        "nobody wrote the volume"
    );
    let conflicts: Vec<Event> = c
        .events_for(name)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FinalizerConflict"))
        .collect();
    assert_eq!(conflicts.len(), 1, "{conflicts:#?}");
    assert!(conflicts[0].count.unwrap_or(0) <= 1, "{conflicts:#?}");
    let metrics = c.metrics.encode();
    assert!(
        metrics.contains("wasmprov_volume_finalizer_conflicts_total{class=\"fast\"} 1"),
        "{metrics}"
    );
}

/// Giving up lasts until the next resync (`--resync-period`, 15 minutes by
/// default, as the Go library's informer): then the claim is tried once
/// more, and given up on again if it still fails.
async fn a_claim_given_up_on_is_tried_again_at_the_next_resync(server: Server) {
    let c = Cluster::start_with(server, &[misbehave()], |config| {
        config.failed_provision_threshold = 2;
        config.resync = Duration::from_secs(3);
    })
    .await;
    c.misbehave_class("broken", "fail").await;
    c.claim("data", "broken", serde_json::json!({})).await;
    c.event(
        "data",
        "ProvisioningFailed",
        "Gave up provisioning after 2 failed attempts",
    )
    .await;
    let e = c
        .event(
            "data",
            "ProvisioningFailed",
            "Gave up provisioning after 3 failed attempts",
        )
        .await;
    let message = e.message.unwrap();
    assert!(
        message.contains("tries again once at each resync (--resync-period=3s) and each time"),
        "{message}"
    );
}

/// A claim refused because its class names a plugin that is not there is
/// looked at again as soon as a version of that plugin loads, not at its
/// next slow retry (5 minutes).
async fn a_claim_waiting_for_its_plugin_is_provisioned_when_the_plugin_loads(server: Server) {
    let mut c = Cluster::start(server, &[]).await;
    // `wasmprov run`, which watches its plugins directory.
    c.stop_host().await;
    let work = tempfile::tempdir().unwrap();
    let _host = HostProcess::spawn(&c, work.path(), "host");
    c.hostpath_class("fast", serde_json::json!({})).await;
    c.claim("data", "fast", serde_json::json!({})).await;
    c.event("data", "ProvisioningFailed", "no plugin named \"hostpath\"")
        .await;
    std::fs::copy(
        rust_plugin_path("hostpath"),
        c._plugins_dir.path().join("hostpath.wasm"),
    )
    .unwrap();
    let pv = c.bound_volume("data").await;
    assert!(host_path(&pv).is_dir());
}

/// The storage a backend is making for a claim is not forgotten when the
/// backend, after `in-background`, answers `no-change` (still at it, nothing
/// new): the claim deleted then has that storage removed once it exists.
/// The Go library keeps such a claim in progress too.
async fn a_claim_deleted_after_no_change_still_has_its_storage_removed(server: Server) {
    // A backoff of 1 s, 2 s, …: the claim is deleted well before
    // its own controller could see the backend finish.
    let c = Cluster::start_with(server, &[misbehave()], |config| {
        config.retry_base = Duration::from_secs(1);
        config.max_retry = Duration::from_secs(300);
    })
    .await;
    let (attempts, deleted) = c
        .slowly_created_claim("data", 5, &[("then", "no-change")])
        .await;
    eventually(
        "the backend answered in-background, then no-change",
        || async { (std::fs::read_to_string(&attempts).ok()? == "xx").then_some(()) },
    )
    .await;

    c.delete_claim_then_storage_is_removed(&deleted, &attempts, 5)
        .await;
}

/// A volume that cannot be saved has its storage deleted, and that delete is
/// retried like the save (`--save-attempts`, `--save-retry-interval`): a
/// backend that fails twice then succeeds leaves nothing behind and no
/// warning; one that keeps failing is tried that many times, then reported.
async fn the_storage_of_an_unsaved_volume_is_deleted_with_retries(server: Server) {
    // One provision each (the threshold gives up after it): exact counts.
    let c = Cluster::start_with(server, &[misbehave()], |config| {
        config.failed_provision_threshold = 1;
        config.save_attempts = 3;
    })
    .await;
    for (class, failures) in [("flaky-delete", "2"), ("broken-delete", "10")] {
        c.class(
            class,
            &[
                ("plugin", "misbehave"),
                ("behavior", "ok"),
                ("delete-failures", failures),
            ],
            serde_json::json!({}),
        )
        .await;
    }
    c.fail_volume_saves().await;
    c.claim("flaky", "flaky-delete", serde_json::json!({}))
        .await;
    c.claim("broken", "broken-delete", serde_json::json!({}))
        .await;
    let files = |uid: String| {
        let dir = c.volumes_dir.path();
        (
            dir.join(format!("pvc-{uid}.delete-attempts")),
            dir.join(format!("pvc-{uid}.deleted")),
        )
    };
    let (flaky_tries, flaky_deleted) = files(c.claims().get("flaky").await.unwrap().uid().unwrap());
    let (broken_tries, broken_deleted) =
        files(c.claims().get("broken").await.unwrap().uid().unwrap());

    // Reported after the cleanup: by then it is over.
    c.event(
        "flaky",
        "ProvisioningFailed",
        "failed to save PersistentVolume",
    )
    .await;
    assert_eq!(std::fs::read_to_string(&flaky_tries).unwrap(), "xxx");
    assert!(
        flaky_deleted.exists(),
        "the third delete removed the storage"
    );
    let warnings: Vec<_> = c
        .events_for("flaky")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ProvisioningCleanupFailed"))
        .filter_map(|e| e.message)
        .collect();
    assert!(warnings.is_empty(), "no leak to report: {warnings:?}");

    c.event(
        "broken",
        "ProvisioningCleanupFailed",
        "tried 3 times, --save-attempts",
    )
    .await;
    assert_eq!(std::fs::read_to_string(&broken_tries).unwrap(), "xxx");
    assert!(!broken_deleted.exists());
}

/// `--save-attempts` and `--save-retry-interval`: a volume the API server
/// refuses to save (500) is tried that many times, that long apart, as the
/// Go library does (5 times, 10 s apart, by default), then its storage is
/// deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saving_a_volume_is_retried_save_attempts_times_save_retry_interval_apart() {
    let c = Cluster::start_with(Server::Simulated, &[hostpath()], |config| {
        config.failed_provision_threshold = 1;
        config.save_attempts = 3;
        config.save_retry_interval = Duration::from_millis(1500);
    })
    .await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    c.fail_volume_saves().await;
    c.claim("data", "fast", serde_json::json!({})).await;
    // The tests' own requests send no token: "" is the host.
    let saves = || c.requests_of("", "create", "persistentvolumes");
    eventually("the host tries to save the volume", || async {
        (saves() >= 1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(saves(), 1, "the second try waits --save-retry-interval");
    c.event(
        "data",
        "ProvisioningFailed",
        "failed to save PersistentVolume",
    )
    .await;
    assert_eq!(saves(), 3, "--save-attempts tries in all");
    assert_eq!(
        std::fs::read_dir(c.volumes_dir.path()).unwrap().count(),
        0,
        "the unsaved volume's storage is deleted"
    );
}

/// A claim answered `in-background` costs the in-progress sweep nothing
/// while it exists (its own controller keeps asking the plugin); once it is
/// deleted, the sweep confirms that with one request and asks the plugin
/// with a backoff (1 s, 2 s, 4 s, …), not at every tick: a backend that
/// takes hours costs a few calls, not one a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_progress_costs_few_requests_and_plugin_calls() {
    let mut c = Cluster::start_with(Server::Simulated, &[misbehave()], |config| {
        config.retry_base = Duration::from_secs(1);
        config.max_retry = Duration::from_secs(300);
    })
    .await;
    c.stop_host().await;
    let host = "the-host";
    let client = c.client_with_token(host).await;
    let dir = c._plugins_dir.path().to_owned();
    c.start_host_with_client(dir, client).await;
    c.misbehave_class("forever", "in-background").await;
    c.claim("data", "forever", serde_json::json!({})).await;
    c.event("data", "ProvisioningFailed", "still creating")
        .await;

    tokio::time::sleep(Duration::from_secs(4)).await;
    let claim_gets = || c.requests_of(host, "get", "persistentvolumeclaims");
    assert_eq!(
        claim_gets(),
        0,
        "no request for a claim that is still there"
    );

    c.delete_claim("data").await;
    c.claim_gone("data").await;
    let before = plugin_calls(&c.metrics, "misbehave", "provision");
    tokio::time::sleep(Duration::from_secs(12)).await;
    let calls = plugin_calls(&c.metrics, "misbehave", "provision") - before;
    // At about 0, 1, 3 and 7 s (the next at 15 s); one a second without
    // a backoff.
    assert!(
        (2..=5).contains(&calls),
        "{calls} plugin calls in 12 s for a deleted claim in progress"
    );
    assert!(
        claim_gets() <= 2,
        "{} GETs of the deleted claim",
        claim_gets()
    );
}

/// The size in bytes of a quantity (`status.capacity.storage`, …).
fn storage_bytes(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Option<u64> {
    wasmprov::quantity::parse_bytes(&map?.get("storage")?.0).ok()
}

/// What a user does to grow a claim: `kubectl patch pvc`.
fn ask_for(c: &Cluster, claim: &str, size: &str) {
    let patch = format!(r#"{{"spec":{{"resources":{{"requests":{{"storage":"{size}"}}}}}}}}"#);
    c.api
        .kubectl(&["patch", "pvc", claim, "-n", "default", "-p", &patch]);
}

/// A host serving hostpath, a class `growable` that allows expansion, and
/// its claim `data`, Bound.
async fn growable_claim(server: Server) -> (Cluster, PersistentVolume) {
    let c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class(
        "growable",
        serde_json::json!({"allowVolumeExpansion": true}),
    )
    .await;
    c.claim("data", "growable", serde_json::json!({})).await;
    let pv = c.bound_volume("data").await;
    (c, pv)
}

/// The claim once its status shows `bytes` (what `kubectl get pvc` shows).
async fn holding(c: &Cluster, claim: &str, bytes: u64) -> PersistentVolumeClaim {
    let claims = c.claims();
    eventually(&format!("claim {claim} holds {bytes} bytes"), || async {
        let found = claims.get(claim).await.ok()?;
        let capacity = storage_bytes(found.status.as_ref()?.capacity.as_ref())?;
        (capacity == bytes).then_some(found)
    })
    .await
}

async fn a_claim_asking_for_more_gets_its_volume_grown(server: Server) {
    let (c, pv) = growable_claim(server).await;

    ask_for(&c, "data", "2Gi");
    // Done when the claim shows the new size; what `kubectl get pvc` shows.
    let claim = holding(&c, "data", 2 << 30).await;
    let grown = c.volumes().get(&pv.name_any()).await.unwrap();
    assert_eq!(
        storage_bytes(grown.spec.as_ref().unwrap().capacity.as_ref()),
        Some(2 << 30),
        "the volume's capacity"
    );
    assert!(host_path(&grown).is_dir(), "the storage is still there");
    let status = claim.status.as_ref().unwrap();
    assert_eq!(
        storage_bytes(status.allocated_resources.as_ref()),
        Some(2 << 30)
    );
    assert!(
        status
            .allocated_resource_statuses
            .as_ref()
            .is_none_or(|s| !s.contains_key("storage")),
        "the expansion is over: {status:?}"
    );
    assert!(
        status
            .conditions
            .iter()
            .flatten()
            .all(|c| c.type_ != "Resizing"),
        "no Resizing condition left: {status:?}"
    );
    let ann = claim.annotations();
    assert_eq!(ann["volume.kubernetes.io/storage-resizer"], PROVISIONER);
    assert_eq!(
        ann["volume.kubernetes.io/node-expansion-not-required"],
        "true"
    );
    c.event("data", "Resizing", &pv.name_any()).await;
    c.event("data", "VolumeResizeSuccessful", "2Gi").await;
    // Counted once the claim is done: a moment after it shows the size.
    for want in [
        "controller_persistentvolumeclaim_resize_total{class=\"growable\"} 1",
        "wasmprov_plugin_calls_total{plugin=\"hostpath\",call=\"resize\",result=\"ok\"} 1",
    ] {
        eventually(&format!("metric {want}"), || async {
            c.metrics.encode().contains(want).then_some(())
        })
        .await;
    }
}

/// A plugin without the `resizer` export (misbehave, like every plugin of
/// contract 0.1) cannot grow volumes: the claim says why, in its events and
/// its status, and nothing else changes.
async fn a_plugin_that_cannot_grow_volumes_marks_the_expansion_infeasible(server: Server) {
    let c = Cluster::start(server, &[misbehave()]).await;
    c.class(
        "fixed",
        &[("plugin", "misbehave"), ("behavior", "ok")],
        serde_json::json!({"allowVolumeExpansion": true}),
    )
    .await;
    c.claim("data", "fixed", serde_json::json!({})).await;
    let pv = c.bound_volume("data").await;

    ask_for(&c, "data", "2Gi");
    let event = c
        .event("data", "VolumeResizeFailed", "cannot grow volumes")
        .await;
    let message = event.message.unwrap_or_default();
    assert!(message.contains("allowVolumeExpansion: false"), "{message}");
    let claims = c.claims();
    let status = eventually("the expansion is marked infeasible", || async {
        let status = claims.get("data").await.ok()?.status?;
        let state = status
            .allocated_resource_statuses
            .as_ref()?
            .get("storage")?;
        (state == "ControllerResizeInfeasible").then_some(status)
    })
    .await;
    assert_eq!(storage_bytes(status.capacity.as_ref()), Some(1 << 30));
    let error = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "ControllerResizeError")
        .expect("a ControllerResizeError condition");
    assert!(
        error
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("cannot grow volumes"),
        "{error:?}"
    );
    let volume = c.volumes().get(&pv.name_any()).await.unwrap();
    assert_eq!(
        storage_bytes(volume.spec.as_ref().unwrap().capacity.as_ref()),
        Some(1 << 30)
    );
}

/// Kubernetes' recovery from a failed expansion: quota-dir refuses a size
/// over its class's `maxBytes` (infeasible); the user asks for less (still
/// more than the claim holds, which the API server allows then), and the
/// host grows the volume to that.
async fn an_infeasible_expansion_recovers_when_the_claim_asks_for_less(server: Server) {
    let c = Cluster::start(server, &[("quota-dir", plugin_path("quota-dir"))]).await;
    let root = c.volumes_dir.path().display().to_string();
    c.class(
        "capped",
        &[
            ("plugin", "quota-dir"),
            ("hostRoot", &root),
            ("maxBytes", "3221225472"),
        ],
        serde_json::json!({"allowVolumeExpansion": true}),
    )
    .await;
    c.claim("data", "capped", serde_json::json!({})).await;
    let pv = c.bound_volume("data").await;
    let quota = host_path(&pv).join(".quota");

    ask_for(&c, "data", "10Gi");
    c.event("data", "VolumeResizeFailed", "maxBytes").await;
    let claims = c.claims();
    let state = |claim: &PersistentVolumeClaim| {
        claim
            .status
            .as_ref()
            .and_then(|s| s.allocated_resource_statuses.as_ref())
            .and_then(|s| s.get("storage").cloned())
    };
    let infeasible = eventually("the expansion is marked infeasible", || async {
        let claim = claims.get("data").await.ok()?;
        (state(&claim).as_deref() == Some("ControllerResizeInfeasible")).then_some(claim)
    })
    .await;
    assert_eq!(
        storage_bytes(
            infeasible
                .status
                .as_ref()
                .unwrap()
                .allocated_resources
                .as_ref()
        ),
        Some(10 << 30)
    );
    assert_eq!(
        std::fs::read_to_string(&quota).unwrap().trim(),
        (1u64 << 30).to_string()
    );

    ask_for(&c, "data", "2Gi");
    let claim = holding(&c, "data", 2 << 30).await;
    assert_eq!(state(&claim), None, "the expansion is over");
    let status = claim.status.as_ref().unwrap();
    assert!(
        status
            .conditions
            .iter()
            .flatten()
            .all(|c| c.type_ != "ControllerResizeError"),
        "{status:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&quota).unwrap().trim(),
        (2u64 << 30).to_string()
    );
    c.event("data", "VolumeResizeSuccessful", "2Gi").await;
}

/// Asking for less than a grown volume holds: the real API server refuses
/// the request itself; where one lets it through (the simulator does not
/// validate it), the host says volumes cannot shrink and changes nothing.
async fn a_volume_is_never_shrunk(server: Server) {
    let (c, pv) = growable_claim(server).await;
    ask_for(&c, "data", "2Gi");
    c.event("data", "VolumeResizeSuccessful", "2Gi").await;

    let shrink = serde_json::json!({"spec": {"resources": {"requests": {"storage": "1Gi"}}}});
    let patched = c
        .claims()
        .patch(
            "data",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&shrink),
        )
        .await;
    match server {
        Server::Real => {
            let err = patched.expect_err("the API server refuses a smaller request");
            assert!(err.to_string().contains("less than"), "{err}");
        }
        Server::Simulated => {
            patched.unwrap();
            c.event("data", "VolumeResizeFailed", "volumes cannot shrink")
                .await;
        }
    }
    let volume = c.volumes().get(&pv.name_any()).await.unwrap();
    assert_eq!(
        storage_bytes(volume.spec.as_ref().unwrap().capacity.as_ref()),
        Some(2 << 30)
    );
}

/// Polls `count` every 20 ms for `window` and returns when it went up, one
/// instant per step: the times of a plugin's calls, to check the waits
/// between retries.
async fn growth_times(window: Duration, count: impl Fn() -> usize) -> Vec<tokio::time::Instant> {
    let end = tokio::time::Instant::now() + window;
    let (mut seen, mut times) = (count(), Vec::new());
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let now = count();
        for _ in seen..now {
            times.push(tokio::time::Instant::now());
        }
        seen = seen.max(now);
    }
    times
}

/// The waits between consecutive `times`, in seconds.
fn gaps(times: &[tokio::time::Instant]) -> Vec<f64> {
    times
        .windows(2)
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect()
}

/// `--retry-interval-start` and `--retry-interval-max` pace the retries of a
/// claim whose backend keeps answering in-background: at 2 s and 4 s, the
/// plugin is asked at 0, 2, 6 and 10 s (the defaults, 15 s, would ask once
/// in that time).
async fn the_retry_interval_flags_pace_a_failing_claim(server: Server) {
    let mut c = Cluster::start(server, &[misbehave()]).await;
    c.stop_host().await;
    let work = tempfile::tempdir().unwrap();
    let _host = HostProcess::spawn_with(
        &c,
        work.path(),
        "paced",
        &["--retry-interval-start=2s", "--retry-interval-max=4s"],
    );
    let (attempts, _) = c.slowly_created_claim("data", 1000, &[]).await;
    let calls = || std::fs::read_to_string(&attempts).map_or(0, |s| s.len());
    eventually("the plugin is first asked", || async {
        (calls() > 0).then_some(())
    })
    .await;
    let first = tokio::time::Instant::now();
    let times = growth_times(Duration::from_secs(12), calls).await;
    let mut waits = vec![(times.first().copied().unwrap_or(first) - first).as_secs_f64()];
    waits.extend(gaps(&times));
    eprintln!("waits between calls: {waits:.2?}");
    assert_eq!(
        times.len(),
        3,
        "asked again at 2, 6 and 10 s after the first call: {waits:.2?}"
    );
    for (wait, want) in waits.iter().zip([2.0, 4.0, 4.0]) {
        assert!(
            (want * 0.95..want + 1.0).contains(wait),
            "{want} s between calls (--retry-interval-start, doubling to --retry-interval-max): {waits:.2?}"
        );
    }
}

/// Counts the writes to claim `name` from now on (its watch events), by
/// anyone: the host's status patches, the user's requests.
fn claim_writes(c: &Cluster, name: &str) -> (Arc<std::sync::atomic::AtomicUsize>, AbortOnDrop) {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = count.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let stream = watcher(
        c.claims(),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    );
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    let _ = ready_tx.send(());
                }
                Ok(watcher::Event::Apply(_)) => {
                    counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                _ => {}
            }
        }
    });
    // Counting starts once the watch is open.
    ready_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the claim watch opens");
    (count, AbortOnDrop(task))
}

/// Aborts a background task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The sizes (bytes) misbehave-resizer was asked to grow `pv` to, a call each.
fn resize_calls(c: &Cluster, pv: &PersistentVolume) -> Vec<u64> {
    let log = c
        .volumes_dir
        .path()
        .join(format!("{}.resizes", pv.name_any()));
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

/// A claim whose plugin fails every expansion is retried with backoff. Each
/// attempt writes the claim's status twice (in progress, then the error),
/// and the watch events of those writes must not start the next attempt
/// early: they did, about one plugin call and two writes per API round trip.
async fn a_failing_expansion_is_retried_with_backoff_not_on_its_own_writes(server: Server) {
    let c = Cluster::start_with(server, &[resizer()], |config| {
        config.retry_base = Duration::from_secs(2);
        config.max_retry = Duration::from_secs(4);
    })
    .await;
    c.class(
        "grow-fails",
        &[("plugin", "resizer"), ("resize", "fail")],
        serde_json::json!({"allowVolumeExpansion": true}),
    )
    .await;
    c.claim("data", "grow-fails", serde_json::json!({})).await;
    let pv = c.bound_volume("data").await;
    let (writes, _watch) = claim_writes(&c, "data");

    ask_for(&c, "data", "2Gi");
    let calls = || resize_calls(&c, &pv).len();
    eventually("the plugin is first asked", || async {
        (calls() > 0).then_some(())
    })
    .await;
    let first = tokio::time::Instant::now();
    let times = growth_times(Duration::from_secs(20), calls).await;
    let mut waits = vec![(times.first().copied().unwrap_or(first) - first).as_secs_f64()];
    waits.extend(gaps(&times));
    eprintln!("waits between resize calls: {waits:.2?}");
    // Retries at 2, 6, 10, 14 and 18 s after the first call.
    assert_eq!(times.len(), 5, "retried with backoff: {waits:.2?}");
    for (wait, want) in waits.iter().zip([2.0, 4.0, 4.0, 4.0, 4.0]) {
        assert!(
            (want * 0.95..want + 1.5).contains(wait),
            "{want} s between attempts: {waits:.2?}"
        );
    }
    let writes = writes.load(std::sync::atomic::Ordering::SeqCst);
    let calls = calls();
    eprintln!("{calls} resize calls, {writes} claim writes");
    // Two status writes per attempt, the user's request, and the next
    // attempt's first write (made before its plugin call).
    assert!(
        writes <= 2 * calls + 3,
        "{writes} claim writes for {calls} attempts"
    );
    let want = format!(
        "controller_persistentvolumeclaim_resize_failed_total{{class=\"grow-fails\"}} {calls}"
    );
    eventually(&format!("metric {want}"), || async {
        c.metrics.encode().contains(&want).then_some(())
    })
    .await;
    c.event("data", "VolumeResizeFailed", "deliberate resize failure")
        .await;
    assert!(resize_calls(&c, &pv).iter().all(|&b| b == 2 << 30));
}

/// A claim of class `name` served by misbehave-resizer with `params`,
/// allowing expansion: its volume once Bound.
async fn resizer_claim(c: &Cluster, class: &str, params: &[(&str, &str)]) -> PersistentVolume {
    let mut all = vec![("plugin", "resizer")];
    all.extend_from_slice(params);
    c.class(
        class,
        &all,
        serde_json::json!({"allowVolumeExpansion": true}),
    )
    .await;
    c.claim("data", class, serde_json::json!({})).await;
    c.bound_volume("data").await
}

/// The claim's `allocatedResourceStatuses.storage`, if any.
fn resize_state(claim: &PersistentVolumeClaim) -> Option<String> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocated_resource_statuses.as_ref())
        .and_then(|s| s.get("storage").cloned())
}

/// An expansion the backend failed (not one it may still be working on) is
/// replaced by a smaller request, as external-resizer allows: the old,
/// larger size was retried forever.
async fn a_failed_expansion_is_replaced_by_a_smaller_request(server: Server) {
    // No retry within the test: each call below is the user's doing.
    let c = Cluster::start_with(server, &[resizer()], |config| {
        config.retry_base = Duration::from_secs(60);
        config.max_retry = Duration::from_secs(60);
    })
    .await;
    let pv = resizer_claim(
        &c,
        "capped",
        &[("resize", "fail-above"), ("max-bytes", "3221225472")],
    )
    .await;

    ask_for(&c, "data", "10Gi");
    c.event("data", "VolumeResizeFailed", "above max-bytes")
        .await;
    let claims = c.claims();
    let failed = eventually("the failed expansion is still in progress", || async {
        let claim = claims.get("data").await.ok()?;
        let failed = claim
            .status
            .as_ref()?
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "ControllerResizeError");
        (failed && resize_state(&claim).as_deref() == Some("ControllerResizeInProgress"))
            .then_some(claim)
    })
    .await;
    assert_eq!(
        storage_bytes(failed.status.as_ref().unwrap().allocated_resources.as_ref()),
        Some(10 << 30)
    );
    assert_eq!(resize_calls(&c, &pv), [10 << 30]);

    ask_for(&c, "data", "2Gi");
    let claim = holding(&c, "data", 2 << 30).await;
    assert_eq!(resize_state(&claim), None, "the expansion is over");
    assert_eq!(
        resize_calls(&c, &pv),
        [10 << 30, 2 << 30],
        "the smaller request replaced the failed one at once"
    );
    c.event("data", "VolumeResizeSuccessful", "2Gi").await;
}

/// The host saved a volume's new size with the node step still to do, then
/// stopped before marking the claim (or the claim's patch conflicted). The
/// next look must leave the claim to the kubelet, not mark it done: the
/// filesystem would never grow.
async fn a_host_that_stopped_between_saving_the_volume_and_the_claim_still_leaves_the_filesystem_step(
    server: Server,
) {
    let mut c = Cluster::start(server, &[resizer()]).await;
    let pv = resizer_claim(&c, "block", &[("resize", "node")]).await;
    c.stop_host().await;
    // What `save_capacity` leaves: the claim in progress to 2Gi, the volume
    // at 2Gi with its size before.
    ask_for(&c, "data", "2Gi");
    c.api.kubectl(&[
        "patch", "pvc", "data", "-n", "default", "--subresource=status", "--type=merge", "-p",
        r#"{"status":{"allocatedResources":{"storage":"2Gi"},"allocatedResourceStatuses":{"storage":"ControllerResizeInProgress"}}}"#,
    ]);
    c.api.kubectl(&[
        "patch", "pv", &pv.name_any(), "--type=merge", "-p",
        r#"{"metadata":{"annotations":{"volume.alpha.kubernetes.io/pre-resize-capacity":"1Gi"}},"spec":{"capacity":{"storage":"2Gi"}}}"#,
    ]);

    c.start_host(c._plugins_dir.path().to_owned()).await;
    let claims = c.claims();
    let claim = eventually("the claim waits for the kubelet", || async {
        let claim = claims.get("data").await.ok()?;
        (resize_state(&claim).as_deref() == Some("NodeResizePending")).then_some(claim)
    })
    .await;
    c.event("data", "FileSystemResizeRequired", "file system resize")
        .await;
    let status = claim.status.as_ref().unwrap();
    assert_eq!(
        storage_bytes(status.capacity.as_ref()),
        Some(1 << 30),
        "the kubelet records the size"
    );
    assert!(
        status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "FileSystemResizePending"),
        "{status:?}"
    );
    assert!(
        !claim
            .annotations()
            .contains_key("volume.kubernetes.io/node-expansion-not-required"),
        "the kubelet must still grow the filesystem"
    );
    assert!(
        resize_calls(&c, &pv).is_empty(),
        "the volume already held 2Gi"
    );
    // And it stays so.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let later = claims.get("data").await.unwrap();
    assert_eq!(resize_state(&later).as_deref(), Some("NodeResizePending"));
    assert!(c
        .events_for("data")
        .await
        .iter()
        .all(|e| e.reason.as_deref() != Some("VolumeResizeSuccessful")));
}

/// A claim asked to grow while the host was down: when the host starts,
/// its volume may not be in the cache yet (here the volumes cannot be
/// listed for a while). Only the cache is read meanwhile, and the volume
/// grows as soon as it is cached, not at the next resync (15 minutes).
/// Simulator only: the real server cannot fail one list on demand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expansion_asked_while_the_host_was_down_is_done_when_its_volume_is_cached() {
    let (mut c, _pv) = growable_claim(Server::Simulated).await;
    c.stop_host().await;
    ask_for(&c, "data", "2Gi");
    c.sim().faults().fail_requests(
        kube_sim::FailureRule::new(1.0, kube_sim::FailWith::Internal)
            .verbs(&["list", "watch"])
            .resources(&["persistentvolumes"]),
    );
    let client = c.client_with_token("the-host").await;
    c.start_host_with_client(c._plugins_dir.path().to_owned(), client)
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        c.requests_of("the-host", "patch", "persistentvolumeclaims"),
        0,
        "nothing is written before the volume is known"
    );
    assert_eq!(plugin_calls(&c.metrics, "hostpath", "resize"), 0);

    c.sim().faults().clear();
    let claims = c.claims();
    eventually_within(Duration::from_secs(40), "the claim holds 2Gi", || async {
        let found = claims.get("data").await.ok()?;
        (storage_bytes(found.status.as_ref()?.capacity.as_ref())? == 2 << 30).then_some(())
    })
    .await;
    assert_eq!(plugin_calls(&c.metrics, "hostpath", "resize"), 1);
}

/// Claims written for old clusters name their class with the beta
/// annotation, which the PV controller still honours (first): it hands such
/// a claim over, and the host must provision it, not wait for class "".
async fn a_claim_naming_its_class_by_the_beta_annotation_is_provisioned(server: Server) {
    let c = Cluster::start(server, &[hostpath()]).await;
    c.hostpath_class("fast", serde_json::json!({})).await;
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "legacy", "namespace": "default",
            "annotations": {"volume.beta.kubernetes.io/storage-class": "fast"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    c.claims()
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
    let pv = c.bound_volume("legacy").await;
    assert_eq!(
        pv.spec.as_ref().unwrap().storage_class_name.as_deref(),
        Some("fast")
    );
    assert!(host_path(&pv).is_dir());
    assert_eq!(plugin_calls(&c.metrics, "hostpath", "provision"), 1);
    assert!(c
        .events_for("legacy")
        .await
        .iter()
        .all(|e| e.reason.as_deref() != Some("ProvisioningFailed")));
}

/// A claim handed to the host whose StorageClass was deleted since fails
/// like any claim: a Warning saying so and how to fix it, the failure
/// metric, backoff and, at the threshold, giving up. It waited silently
/// forever. A recreated class is tried at once.
async fn a_claim_whose_class_was_deleted_is_reported_counted_and_given_up(server: Server) {
    let mut c = Cluster::start_with(server, &[hostpath()], |config| {
        config.failed_provision_threshold = 3;
    })
    .await;
    c.stop_host().await;
    c.hostpath_class("doomed", serde_json::json!({})).await;
    c.claim("data", "doomed", serde_json::json!({})).await;
    let claims = c.claims();
    eventually("the PV controller hands the claim over", || async {
        let claim = claims.get("data").await.ok()?;
        claim
            .annotations()
            .contains_key("volume.kubernetes.io/storage-provisioner")
            .then_some(())
    })
    .await;
    Api::<StorageClass>::all(c.client.clone())
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();

    c.start_host(c._plugins_dir.path().to_owned()).await;
    c.event(
        "data",
        "ProvisioningFailed",
        "StorageClass \"doomed\" not found",
    )
    .await;
    c.event(
        "data",
        "ProvisioningFailed",
        "Gave up provisioning after 3 failed attempts",
    )
    .await;
    let failed = || {
        let prefix = "controller_persistentvolumeclaim_provision_failed_total{class=\"doomed\",source=\"\"} ";
        c.metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(prefix)?.parse::<u64>().ok())
    };
    assert_eq!(failed(), Some(3), "each failure counted");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(failed(), Some(3), "no attempt after giving up");
    assert_eq!(plugin_calls(&c.metrics, "hostpath", "provision"), 0);

    c.hostpath_class("doomed", serde_json::json!({})).await;
    let pv = c.bound_volume("data").await;
    assert!(host_path(&pv).is_dir());
}
