//! Hot reload of plugins and of the sandbox policy from a watched directory:
//! what an operator sees when they update the plugins ConfigMap.
//!
//! Each test writes files the way they arrive in production (kubelet's
//! `..data` symlink swap, or plain writes) and checks which version serves
//! the next call.

mod support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{ListParams, PostParams};
use kube::{Api, ResourceExt};
use support::kubelet::KubeletVolume;
use support::{
    claim, class, digest, eventually, guest_path, ok_preopen, options, plugin_path, variant,
    MISBEHAVE_OUTPUT, OK_PREOPEN,
};
use tempfile::TempDir;
use wasmprov::delivery::{self, encoding, WatchConfig};
use wasmprov::lifecycle;
use wasmprov::metrics::Metrics;
use wasmprov::policy::PolicySet;
use wasmprov::provisioner::Provisioner;
use wasmprov::registry::PluginRegistry;
use wasmprov::runtime::{Runtime, RuntimeConfig};

fn hostpath_wasm() -> Vec<u8> {
    std::fs::read(plugin_path("hostpath")).unwrap()
}

/// The sandbox policy of these tests' plugins; hostpath records `hostRoot`
/// on its volumes, as deploy/policy.yaml does, so they are deleted without
/// their class (these tests call the registry directly).
fn policy_for(volumes: &Path) -> String {
    ok_preopen();
    format!(
        "plugins:\n  hostpath:\n    preopens: [{{host: {dir}, guest: /volumes, mode: read-write}}]\n    \
         output: {{sources: [hostPath], paths: [{dir}]}}\n    \
         recordParameters: [hostRoot]\n  \
         slow:\n    timeout: 30s\n    preopens: [{OK_PREOPEN}]\n    output: {MISBEHAVE_OUTPUT}\n",
        dir = volumes.display()
    )
}

/// A host's plugin registry fed by a watched directory, as `wasmprov run`
/// sets it up.
struct Host {
    registry: Arc<PluginRegistry>,
    metrics: Arc<Metrics>,
    policy: PathBuf,
}

impl Host {
    async fn start(plugins: &Path, policy: &Path, cache: Option<&Path>) -> Self {
        // RUST_LOG=wasmprov=debug shows the host's logs of a failing test.
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .try_init();
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: cache.map(Path::to_owned),
            max_concurrent_calls: 8,
            ..RuntimeConfig::default()
        })
        .unwrap();
        let metrics = Arc::new(Metrics::default());
        let registry = delivery::serve_directory(
            plugins,
            Some(policy),
            Arc::new(runtime),
            metrics.clone(),
            WatchConfig {
                debounce: Duration::from_millis(50),
                ..WatchConfig::default()
            },
        )
        .await
        .unwrap();
        Self {
            registry,
            metrics,
            policy: policy.to_owned(),
        }
    }

    /// Waits until `plugin` serves the version `digest`.
    async fn serves(&self, plugin: &str, digest: &str) {
        eventually(&format!("{plugin} serves {digest}"), || async {
            self.registry
                .serving()
                .contains(&(plugin.to_owned(), digest.to_owned()))
                .then_some(())
        })
        .await;
    }

    async fn provision(&self, plugin: &str, claim_name: &str) -> Result<PersistentVolume, String> {
        self.provision_with(plugin, claim_name, &[]).await
    }

    async fn provision_with(
        &self,
        plugin: &str,
        claim_name: &str,
        params: &[(&str, &str)],
    ) -> Result<PersistentVolume, String> {
        let mut claim = claim(claim_name, "1Mi");
        claim.metadata.uid = Some(format!("uid-{claim_name}"));
        let mut params = params.to_vec();
        // The hostRoot the policy file grants now: the host checks that a
        // volume's directory is really there.
        let root = PolicySet::load(&self.policy)
            .ok()
            .and_then(|p| p.sandbox_for("hostpath").preopens.first().cloned())
            .map(|p| p.host.display().to_string())
            .unwrap_or_default();
        if plugin == "hostpath" && !params.iter().any(|(k, _)| *k == "hostRoot") {
            params.push(("hostRoot", &root));
        }
        let opts = options(&format!("pvc-{claim_name}"), class("c", &params), claim);
        self.registry
            .provision(plugin, &opts)
            .await
            .map_err(|e| e.message)
    }

    fn reloads(&self, plugin: &str, result: &str) -> u64 {
        let want =
            format!("wasmprov_plugin_reload_total{{plugin=\"{plugin}\",result=\"{result}\"}} ");
        self.metrics
            .encode()
            .lines()
            .find_map(|l| l.strip_prefix(&want)?.parse().ok())
            .unwrap_or(0)
    }
}

fn made_by(pv: &PersistentVolume) -> String {
    pv.annotations()["wasmprov.io/plugin-digest"].clone()
}

fn policy_file(volumes: &Path) -> (TempDir, PathBuf) {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, policy_for(volumes)).unwrap();
    (dir, file)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_configmap_update_swaps_the_version_and_calls_in_flight_finish_on_the_old_one() {
    let hostpath = hostpath_wasm();
    let slow = std::fs::read(guest_path("misbehave")).unwrap();
    let (v1, v2) = (variant(&hostpath, "1"), variant(&hostpath, "2"));
    let (slow1, slow2) = (variant(&slow, "1"), variant(&slow, "2"));
    let mut mount = KubeletVolume::new(&[("hostpath.wasm", &v1), ("slow.wasm", &slow1)]);
    let volumes = TempDir::new().unwrap();
    let (_p, policy) = policy_file(volumes.path());
    let host = Host::start(mount.path(), &policy, None).await;
    host.serves("hostpath", &digest(&v1)).await;
    let pv = host.provision("hostpath", "before").await.unwrap();
    assert_eq!(made_by(&pv), digest(&v1));

    // A call that takes a second is running when the new version lands.
    let registry = host.registry.clone();
    let in_flight = tokio::spawn(async move {
        let opts = options(
            "pvc-long",
            class("c", &[("behavior", "spin"), ("spin-ms", "1500")]),
            claim("long", "1Mi"),
        );
        registry.provision("slow", &opts).await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    mount.update(&[("hostpath.wasm", &v2), ("slow.wasm", &slow2)]);
    host.serves("hostpath", &digest(&v2)).await;
    host.serves("slow", &digest(&slow2)).await;
    let pv = host.provision("hostpath", "after").await.unwrap();
    assert_eq!(made_by(&pv), digest(&v2), "new calls get the new version");
    let long = in_flight
        .await
        .unwrap()
        .expect("the call in flight succeeds");
    assert_eq!(
        made_by(&long),
        digest(&slow1),
        "the call in flight finished on the version it started with"
    );
    assert_eq!(host.reloads("hostpath", "loaded"), 2);
    assert_eq!(host.reloads("hostpath", "rejected"), 0);
    let metrics = host.metrics.encode();
    let info = format!(
        "wasmprov_plugin_info{{plugin=\"hostpath\",digest=\"{}\"}} 1",
        digest(&v2)
    );
    assert!(metrics.contains(&info), "{info} in\n{metrics}");
    assert!(
        !metrics.contains(&digest(&v1)),
        "the old version's series is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_versions_are_rejected_and_the_previous_one_keeps_serving() {
    let good = hostpath_wasm();
    let wrong_world = std::fs::read(guest_path("other-world")).unwrap();
    let mut truncated = good.clone();
    truncated.truncate(good.len() / 2);
    let mut bad_zstd = encoding::encode(encoding::Encoding::Zstd, &good).unwrap();
    bad_zstd.truncate(bad_zstd.len() - 10);
    let mut mount = KubeletVolume::new(&[("hostpath.wasm", &good)]);
    let volumes = TempDir::new().unwrap();
    let (_p, policy) = policy_file(volumes.path());
    let host = Host::start(mount.path(), &policy, None).await;
    host.serves("hostpath", &digest(&good)).await;

    let cases: [(&str, &str, Vec<u8>, &str); 4] = [
        (
            "corrupt",
            "hostpath.wasm",
            b"\0asm garbage".to_vec(),
            "hostpath",
        ),
        ("truncated", "hostpath.wasm", truncated, "hostpath"),
        (
            "wrong world",
            "hostpath.wasm",
            wrong_world,
            "does not export",
        ),
        ("bad zstd", "hostpath.wasm.zst", bad_zstd, "zstd"),
    ];
    for (i, (what, file, bytes, _)) in cases.iter().enumerate() {
        mount.update(&[(file, bytes)]);
        let want = i as u64 + 1;
        eventually(&format!("the {what} version is rejected"), || async {
            (host.reloads("hostpath", "rejected") >= want).then_some(())
        })
        .await;
        let pv = host
            .provision("hostpath", &format!("claim-{i}"))
            .await
            .unwrap_or_else(|e| panic!("after the {what} version: {e}"));
        assert_eq!(
            made_by(&pv),
            digest(&good),
            "the old version serves after {what}"
        );
    }
    assert_eq!(host.reloads("hostpath", "loaded"), 1);

    // Fixing the file is picked up like any update.
    let fixed = variant(&good, "7");
    mount.update(&[("hostpath.wasm", &fixed)]);
    host.serves("hostpath", &digest(&fixed)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_plugin_that_is_broken_fails_claims_with_the_reason() {
    let mount = KubeletVolume::new(&[("hostpath.wasm", b"not wasm at all")]);
    let volumes = TempDir::new().unwrap();
    let (_p, policy) = policy_file(volumes.path());
    let host = Host::start(mount.path(), &policy, None).await;
    let err = host.provision("hostpath", "x").await.unwrap_err();
    assert!(
        err.contains("failed to load") && err.contains("not a WebAssembly file"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_writes_compressed_files_and_ambiguous_names() {
    let good = hostpath_wasm();
    let dir = TempDir::new().unwrap();
    let volumes = TempDir::new().unwrap();
    let (_p, policy) = policy_file(volumes.path());
    let host = Host::start(dir.path(), &policy, None).await;
    assert!(host.registry.serving().is_empty());

    // A file copied in slowly, in pieces: loaded once it is whole.
    let v1 = variant(&good, "1");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(dir.path().join("hostpath.wasm")).unwrap();
        for piece in v1.chunks(v1.len() / 4 + 1) {
            f.write_all(piece).unwrap();
            f.flush().unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    host.serves("hostpath", &digest(&v1)).await;

    // Compressed versions replace it (written atomically, as tools do).
    for (n, encoding) in [(2, encoding::Encoding::Zstd), (3, encoding::Encoding::Gzip)] {
        let v = variant(&good, &n.to_string());
        let file = format!("hostpath{}", encoding.suffix());
        let tmp = dir.path().join(format!(".{file}.tmp"));
        std::fs::write(&tmp, encoding::encode(encoding, &v).unwrap()).unwrap();
        std::fs::rename(&tmp, dir.path().join(&file)).unwrap();
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap().to_str().unwrap() != file {
                std::fs::remove_file(path).unwrap();
            }
        }
        host.serves("hostpath", &digest(&v)).await;
    }

    // Two files for one plugin: neither is taken, the current one serves.
    std::fs::write(dir.path().join("hostpath.wasm"), variant(&good, "4")).unwrap();
    eventually("the ambiguous files are reported", || async {
        (host.reloads("hostpath", "rejected") >= 1).then_some(())
    })
    .await;
    let pv = host.provision("hostpath", "x").await.unwrap();
    assert_eq!(made_by(&pv), digest(&variant(&good, "3")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_plugin_stops_provisioning_but_still_deletes_its_volumes() {
    let good = variant(&hostpath_wasm(), "11");
    let cache = TempDir::new().unwrap();
    let mut mount = KubeletVolume::new(&[("hostpath.wasm", &good)]);
    let volumes = TempDir::new().unwrap();
    let (_p, policy) = policy_file(volumes.path());
    let host = Host::start(mount.path(), &policy, Some(cache.path())).await;
    host.serves("hostpath", &digest(&good)).await;
    let first = host.provision("hostpath", "first").await.unwrap();
    let second = host.provision("hostpath", "second").await.unwrap();
    let dir_of = |pv: &PersistentVolume| {
        let path = &pv.spec.as_ref().unwrap().host_path.as_ref().unwrap().path;
        volumes.path().join(Path::new(path).file_name().unwrap())
    };
    assert!(dir_of(&first).is_dir() && dir_of(&second).is_dir());

    mount.update(&[]);
    eventually("the plugin is removed", || async {
        host.registry.serving().is_empty().then_some(())
    })
    .await;
    let err = host.provision("hostpath", "third").await.unwrap_err();
    assert!(
        err.contains("plugin hostpath was removed")
            && err.contains(&mount.path().display().to_string()),
        "{err}"
    );
    host.registry.delete("hostpath", &first).await.unwrap();
    assert!(
        !dir_of(&first).exists(),
        "the removed plugin deleted its volume"
    );
    assert_eq!(host.reloads("hostpath", "removed"), 1);
    assert!(!host.metrics.encode().contains("wasmprov_plugin_info{"));

    // After a restart the file is still gone; the compile cache still has
    // the version recorded on the volume.
    drop(host);
    let restarted = Host::start(mount.path(), &policy, Some(cache.path())).await;
    restarted
        .registry
        .delete("hostpath", &second)
        .await
        .unwrap();
    assert!(!dir_of(&second).exists());

    // Without that cache, the delete fails and says how to fix it.
    let third = {
        mount.update(&[("hostpath.wasm", &good)]);
        restarted.serves("hostpath", &digest(&good)).await;
        restarted.provision("hostpath", "third").await.unwrap()
    };
    mount.update(&[]);
    drop(restarted);
    let no_cache = Host::start(mount.path(), &policy, None).await;
    let err = no_cache
        .registry
        .delete("hostpath", &third)
        .await
        .unwrap_err()
        .message;
    assert!(
        err.contains("not in the compile cache") && err.contains("restore the plugin"),
        "{err}"
    );
    assert!(dir_of(&third).is_dir(), "nothing was lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_change_applies_to_the_next_call_and_a_broken_one_is_rejected() {
    let mount = KubeletVolume::new(&[("hostpath.wasm", &hostpath_wasm())]);
    let (first, second) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let mut policy_mount =
        KubeletVolume::new(&[("policy.yaml", policy_for(first.path()).as_bytes())]);
    let policy = policy_mount.path().join("policy.yaml");
    let host = Host::start(mount.path(), &policy, None).await;
    let parent = |pv: &PersistentVolume| {
        PathBuf::from(&pv.spec.as_ref().unwrap().host_path.as_ref().unwrap().path)
    };
    let pv = host.provision("hostpath", "a").await.unwrap();
    assert!(first.path().join(parent(&pv).file_name().unwrap()).is_dir());

    policy_mount.update(&[("policy.yaml", policy_for(second.path()).as_bytes())]);
    let pv = eventually("the new policy applies", || async {
        let pv = host.provision("hostpath", "b").await.ok()?;
        second
            .path()
            .join(parent(&pv).file_name().unwrap())
            .is_dir()
            .then_some(pv)
    })
    .await;
    let _ = pv;

    // A broken policy is rejected; the one in force stays.
    policy_mount.update(&[(
        "policy.yaml",
        b"plugins:\n  hostpath:\n    memoryLimt: 1Gi\n",
    )]);
    eventually("the broken policy is rejected", || async {
        host.metrics
            .encode()
            .contains("wasmprov_policy_reload_total{result=\"rejected\"} 1")
            .then_some(())
    })
    .await;
    let root = second.path().display().to_string();
    let pv = host
        .provision_with("hostpath", "c", &[("hostRoot", &root)])
        .await
        .unwrap();
    assert!(second
        .path()
        .join(parent(&pv).file_name().unwrap())
        .is_dir());
}

/// Claims keep arriving on a simulated cluster while the hostpath plugin is
/// replaced ten times: every claim is bound exactly once and none fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_keep_binding_while_the_plugin_is_replaced_ten_times() {
    const SWAPS: u32 = 10;
    let sim = kube_sim::Simulator::start(kube_sim::Config::default())
        .await
        .unwrap();
    let client = sim.client().unwrap();
    let good = hostpath_wasm();
    let mut mount = KubeletVolume::new(&[("hostpath.wasm", &variant(&good, "0"))]);
    let volumes = TempDir::new().unwrap();
    let (_p, policy) = policy_file(volumes.path());
    let host = Host::start(mount.path(), &policy, None).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let mut config = lifecycle::Config::new("wasmprov.io/host");
    config.retry_base = Duration::from_millis(100);
    let lifecycle = tokio::spawn(lifecycle::run(
        client.clone(),
        host.registry.clone(),
        config,
        host.metrics.clone(),
        async move {
            let _ = stopped.await;
        },
    ));
    let classes: Api<StorageClass> = Api::all(client.clone());
    let mut sc = class(
        "fast",
        &[
            ("plugin", "hostpath"),
            ("hostRoot", &volumes.path().display().to_string()),
        ],
    );
    sc.volume_binding_mode = Some("Immediate".into());
    classes.create(&PostParams::default(), &sc).await.unwrap();

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    // Claims keep arriving until every swap is done.
    let stop_creating = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let creating = {
        let (claims, stop) = (claims.clone(), stop_creating.clone());
        tokio::spawn(async move {
            let mut created = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let mut c = claim(&format!("claim-{created:03}"), "1Mi");
                c.metadata.uid = None;
                c.spec.as_mut().unwrap().storage_class_name = Some("fast".into());
                claims.create(&PostParams::default(), &c).await.unwrap();
                created += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            created
        })
    };
    let pv_api: Api<PersistentVolume> = Api::all(client.clone());
    // Each version provisions at least one claim before the next replaces
    // it, while other claims are in flight.
    let made_a_volume = |digest: String| {
        let pv_api = pv_api.clone();
        async move {
            eventually(&format!("{digest} provisions a claim"), || async {
                let list = pv_api.list(&ListParams::default()).await.ok()?;
                list.items
                    .iter()
                    .any(|pv| made_by(pv) == digest)
                    .then_some(())
            })
            .await
        }
    };
    for n in 1..=SWAPS {
        made_a_volume(digest(&variant(&good, &(n - 1).to_string()))).await;
        let next = variant(&good, &n.to_string());
        mount.update(&[("hostpath.wasm", &next)]);
        host.serves("hostpath", &digest(&next)).await;
    }
    made_a_volume(digest(&variant(&good, &SWAPS.to_string()))).await;
    stop_creating.store(true, std::sync::atomic::Ordering::SeqCst);
    let created = creating.await.unwrap();

    let bound = eventually("every claim is Bound", || async {
        let list = claims.list(&ListParams::default()).await.ok()?;
        let bound: Vec<String> = list
            .items
            .iter()
            .filter_map(|c| {
                let status = c.status.as_ref()?;
                (status.phase.as_deref() == Some("Bound")).then(|| c.spec.clone()?.volume_name)?
            })
            .collect();
        (bound.len() == created).then_some(bound)
    })
    .await;
    let pvs = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(pvs.len(), created, "exactly one volume per claim");
    let mut names: Vec<&String> = bound.iter().collect();
    names.dedup();
    assert_eq!(names.len(), created);
    let dirs = std::fs::read_dir(volumes.path()).unwrap().count();
    assert_eq!(dirs, created, "one directory per claim, none leaked");
    let versions: std::collections::BTreeSet<String> = pvs.iter().map(made_by).collect();
    assert_eq!(
        versions.len(),
        SWAPS as usize + 1,
        "every version provisioned claims"
    );
    let failed = host.metrics.encode();
    assert!(
        !failed.contains("controller_persistentvolumeclaim_provision_failed_total{"),
        "no claim failed:\n{failed}"
    );
    assert_eq!(host.reloads("hostpath", "loaded"), u64::from(SWAPS) + 1);
    let _ = stop.send(());
    lifecycle.await.unwrap();
}
