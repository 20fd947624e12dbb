//! Plugins in OCI registries, as their authors publish them: `wasmprov
//! plugin push` and `pull` against a real registry (distribution v3, built
//! with the test cluster, on loopback): the CNCF layout pushed and pulled
//! back byte for byte, by tag and by digest; the older layout accepted;
//! anything else, anything larger than allowed, and anything whose bytes do
//! not match their digest refused, saying why.

#[path = "oci/cosign.rs"]
mod cosign;
mod support;

use std::process::Output;
use std::time::{Duration, Instant};

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use support::registry::Registry;
use support::{rust_plugin_path, wasmprov, wasmprov_command};
use wasmprov::oci::{self, Access, Limits, LEGACY_WASM_LAYER, WASM_CONFIG, WASM_LAYER};

fn plain() -> Access {
    Access {
        plain_http: true,
        ..Default::default()
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A registry client of our own, over plain HTTP: to make and read
/// artifacts `wasmprov` would not.
fn raw_client() -> Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..Default::default()
    })
}

/// Pushes an artifact of our own making: `layers` as (media type, bytes).
async fn push_raw(reference: &str, config_type: &str, layers: &[(&str, &[u8])]) {
    let client = raw_client();
    let layers: Vec<ImageLayer> = layers
        .iter()
        .map(|(media_type, data)| ImageLayer::new(data.to_vec(), media_type.to_string(), None))
        .collect();
    let config = Config::new(b"{}".to_vec(), config_type.to_owned(), None);
    let manifest = OciImageManifest::build(&layers, &config, None);
    client
        .push(
            &reference.parse::<Reference>().unwrap(),
            &layers,
            config,
            &RegistryAuth::Anonymous,
            Some(manifest),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_pushed_plugin_pulls_back_byte_for_byte_in_the_cncf_layout() {
    let registry = Registry::start();
    let file = rust_plugin_path("hostpath");
    let component = std::fs::read(&file).unwrap();
    let reference = registry.reference("plugins/hostpath:1.0.0");
    let out = wasmprov(&[
        "plugin",
        "push",
        file.to_str().unwrap(),
        &reference,
        "--plain-http",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let pushed = text(&out);
    let digest = pushed
        .lines()
        .find_map(|l| l.strip_prefix("digest: "))
        .unwrap_or_else(|| panic!("no digest in {pushed}"))
        .to_owned();

    let dir = tempfile::tempdir().unwrap();
    for (from, name) in [
        (reference.clone(), "by-tag.wasm"),
        (
            registry.reference(&format!("plugins/hostpath@{digest}")),
            "by-digest.wasm",
        ),
    ] {
        let target = dir.path().join(name);
        let out = wasmprov(&[
            "plugin",
            "pull",
            &from,
            "-o",
            target.to_str().unwrap(),
            "--plain-http",
        ]);
        assert!(out.status.success(), "{from}: {}", text(&out));
        assert!(
            text(&out).contains(&format!("digest: {digest}")),
            "{}",
            text(&out)
        );
        assert!(
            std::fs::read(&target).unwrap() == component,
            "{from}: other bytes"
        );
    }

    // The CNCF layout: the config says what the component imports and
    // exports; one application/wasm layer, titled.
    let (manifest, _) = raw_client()
        .pull_manifest_raw(
            &reference.parse::<Reference>().unwrap(),
            &RegistryAuth::Anonymous,
            &[oci_client::manifest::OCI_IMAGE_MEDIA_TYPE],
        )
        .await
        .unwrap();
    let manifest: OciImageManifest = serde_json::from_slice(&manifest).unwrap();
    assert_eq!(manifest.config.media_type, WASM_CONFIG);
    assert_eq!(manifest.layers.len(), 1);
    assert_eq!(manifest.layers[0].media_type, WASM_LAYER);
    assert_eq!(
        manifest.layers[0].annotations.as_ref().unwrap()["org.opencontainers.image.title"],
        "hostpath.wasm"
    );
    let config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(registry.blob(&manifest.config.digest)).unwrap())
            .unwrap();
    assert_eq!(config["architecture"], "wasm");
    let exports = config["component"]["exports"].to_string();
    assert!(
        exports.contains("wasmprov:provisioner/plugin@0.3.0"),
        "{config}"
    );
}

#[tokio::test]
async fn the_older_wasm_layout_is_accepted() {
    let registry = Registry::start();
    let component = std::fs::read(rust_plugin_path("hostpath")).unwrap();
    let reference = registry.reference("legacy/hostpath:1");
    push_raw(
        &reference,
        "application/vnd.wasm.config.v1+json",
        &[(LEGACY_WASM_LAYER, &component)],
    )
    .await;
    let pulled = oci::pull(&reference, &plain(), Limits::default())
        .await
        .unwrap();
    assert!(pulled.component == component);
    assert_eq!(pulled.layer_media_type, LEGACY_WASM_LAYER);
}

#[tokio::test]
async fn what_is_not_one_component_is_refused_saying_why() {
    let registry = Registry::start();
    let component = std::fs::read(rust_plugin_path("hostpath")).unwrap();

    // A core module or another file is not pushed.
    let dir = tempfile::tempdir().unwrap();
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    let out = wasmprov(&[
        "plugin",
        "push",
        core.to_str().unwrap(),
        &registry.reference("x/core:1"),
        "--plain-http",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("core.wasm is not a WebAssembly component"),
        "{}",
        text(&out)
    );

    // A container image's layer, or two layers, are not a plugin.
    let image = registry.reference("x/image:1");
    push_raw(
        &image,
        "application/vnd.oci.image.config.v1+json",
        &[("application/vnd.oci.image.layer.v1.tar", &component)],
    )
    .await;
    let error = oci::pull(&image, &plain(), Limits::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("its layer is of type application/vnd.oci.image.layer.v1.tar")
            && error.contains(&image),
        "{error}"
    );
    let two = registry.reference("x/two:1");
    push_raw(
        &two,
        WASM_CONFIG,
        &[(WASM_LAYER, &component), (WASM_LAYER, b"more")],
    )
    .await;
    let error = oci::pull(&two, &plain(), Limits::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("it has 2 layers"), "{error}");
}

#[tokio::test]
async fn a_pull_takes_no_more_than_it_allows_and_checks_every_byte() {
    let registry = Registry::start();
    let component = std::fs::read(rust_plugin_path("hostpath")).unwrap();
    let reference = registry.reference("plugins/hostpath:1");
    let digest = oci::push(&reference, "hostpath", &component, &plain())
        .await
        .unwrap();

    // Larger than allowed: refused before any of it is read.
    let small = Limits {
        max_component_bytes: 1000,
    };
    let error = oci::pull(&reference, &plain(), small)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!(
            "its component has {} bytes, more than the 1000",
            component.len()
        )),
        "{error}"
    );

    // A blob changed in the registry (same size): its digest gives it away.
    let layer = registry.blob(&oci::digest(&component));
    let mut tampered = component.clone();
    let middle = tampered.len() / 2;
    tampered[middle] ^= 0xff;
    std::fs::write(&layer, &tampered).unwrap();
    let error = oci::pull(&reference, &plain(), Limits::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&reference) && error.to_lowercase().contains("digest"),
        "{error}"
    );

    // A digest reference pins the manifest: another digest is not served.
    let pinned = registry.reference(&format!("plugins/hostpath@{digest}"));
    std::fs::write(&layer, &component).unwrap();
    assert!(oci::pull(&pinned, &plain(), Limits::default())
        .await
        .is_ok());
    let other = format!("sha256:{}", "0".repeat(64));
    let error = oci::pull(
        &registry.reference(&format!("plugins/hostpath@{other}")),
        &plain(),
        Limits::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, oci::OciError::Registry { .. }), "{error}");
}

#[tokio::test]
async fn an_unreachable_registry_or_a_bad_reference_is_named() {
    let registry = Registry::start();
    let reference = registry.reference("plugins/hostpath:1");
    // Plain HTTP only when asked: HTTPS to this registry fails.
    let error = oci::pull(&reference, &Access::default(), Limits::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with(&format!(
            "{reference}: the registry refused or could not be reached"
        )),
        "{error}"
    );
    drop(registry);
    let error = oci::pull(&reference, &plain(), Limits::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("could not be reached"), "{error}");
    let error = oci::pull("Not A Reference!", &plain(), Limits::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("is not an OCI reference") && error.contains("REGISTRY/REPOSITORY:TAG"),
        "{error}"
    );
}

#[test]
fn a_registry_that_wants_a_login_gets_one_from_standard_input() {
    let registry = Registry::with_login("author", "s3cret");
    let file = rust_plugin_path("hostpath");
    let reference = registry.reference("private/hostpath:1");
    let push = |login: Option<&str>| {
        let mut command = wasmprov_command();
        command.args(["plugin", "push"]).arg(&file).arg(&reference);
        command.arg("--plain-http");
        if login.is_some() {
            command.args(["--username", "author", "--password-stdin"]);
        }
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command.spawn().unwrap();
        if let Some(password) = login {
            use std::io::Write;
            writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
        }
        child.wait_with_output().unwrap()
    };
    let anonymous = push(None);
    assert!(!anonymous.status.success(), "{}", text(&anonymous));
    assert!(
        text(&anonymous).contains(&reference),
        "{}",
        text(&anonymous)
    );
    let wrong = push(Some("guess"));
    assert!(!wrong.status.success(), "{}", text(&wrong));
    let right = push(Some("s3cret"));
    assert!(right.status.success(), "{}", text(&right));
    let out = wasmprov(&[
        "plugin",
        "pull",
        &reference,
        "--plain-http",
        "--username",
        "author",
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("--username author needs --password-stdin"),
        "{}",
        text(&out)
    );
}

/// A host whose policy names plugin hostpath by `reference` (which may go
/// on with more of the image entry: `REF, signature: {…}`), keeping what
/// it pulls in `cache`, reaching registries as `registries` (the policy's
/// `registries:` block, indented) says.
async fn host_of(
    reference: &str,
    cache: &std::path::Path,
    registries: &str,
) -> (
    std::sync::Arc<wasmprov::registry::PluginRegistry>,
    tempfile::TempDir,
) {
    host_with(
        &format!(
            "plugins:\n  hostpath:\n    image: {{reference: {reference}, pollInterval: 1s}}\n\
             registries:\n{registries}"
        ),
        cache,
    )
    .await
}

/// A host whose sandbox policy is `policy` (YAML), keeping what it pulls
/// in `cache`.
async fn host_with(
    policy: &str,
    cache: &std::path::Path,
) -> (
    std::sync::Arc<wasmprov::registry::PluginRegistry>,
    tempfile::TempDir,
) {
    use wasmprov::delivery;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.yaml");
    std::fs::write(&file, policy).unwrap();
    let runtime = wasmprov::runtime::Runtime::new(wasmprov::runtime::RuntimeConfig {
        cache_dir: Some(cache.to_owned()),
        ..Default::default()
    })
    .unwrap();
    let sources = delivery::Sources {
        policy: Some(&file),
        ..Default::default()
    };
    let registry = delivery::serve(
        sources,
        std::sync::Arc::new(runtime),
        std::sync::Arc::new(wasmprov::metrics::Metrics::default()),
        delivery::WatchConfig::default(),
    )
    .await
    .unwrap();
    (registry, dir)
}

/// Points `to` (a tag) at the manifest `from` names, as `oras tag` does.
async fn retag(from: &str, to: &str) {
    let client = raw_client();
    let (body, _) = client
        .pull_manifest_raw(
            &from.parse().unwrap(),
            &RegistryAuth::Anonymous,
            &[oci_client::manifest::OCI_IMAGE_MEDIA_TYPE],
        )
        .await
        .unwrap();
    client
        .push_manifest_raw(
            &to.parse().unwrap(),
            body,
            oci_client::manifest::OCI_IMAGE_MEDIA_TYPE.parse().unwrap(),
        )
        .await
        .unwrap();
}

/// The `registries:` entry for `registry`: plain HTTP.
fn plain_http(registry: &Registry) -> String {
    format!("  {}: {{plainHttp: true}}\n", registry.addr)
}

/// Waits until `host` serves hostpath at `digest`.
async fn serving(host: &wasmprov::registry::PluginRegistry, digest: &str, what: &str) {
    serving_as(host, "hostpath", digest, what).await
}

/// Waits until `host` serves `plugin` at `digest`.
async fn serving_as(
    host: &wasmprov::registry::PluginRegistry,
    plugin: &str,
    digest: &str,
    what: &str,
) {
    let started = Instant::now();
    while host.serving_digest(plugin).as_deref() != Some(digest) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: serving {:?}",
            host.serving_digest(plugin)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_follows_a_plugin_by_reference_and_survives_its_registry_going() {
    let registry = Registry::start();
    let v1 = std::fs::read(rust_plugin_path("hostpath")).unwrap();
    let v2 = support::variant(&v1, "oci-v2");
    let reference = registry.reference("plugins/hostpath:stable");
    oci::push(&reference, "hostpath", &v1, &plain())
        .await
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (host, _policy) = host_of(&reference, cache.path(), &plain_http(&registry)).await;
    // Looked up before the host is ready.
    assert_eq!(host.serving_digest("hostpath"), Some(oci::digest(&v1)));
    // Another source's version of it is not loaded: the policy names its source.
    let other = wasmprov::registry::Origin::new("the plugins directory", "hostpath.wasm");
    match host.apply("hostpath", v2.clone(), &other).await {
        wasmprov::registry::Reload::Rejected { reason } => assert!(
            reason.contains(&format!("comes from {reference} (plugins.hostpath.image")),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }

    // The tag moves: the new version serves after the next look.
    let v2_manifest = oci::push(&reference, "hostpath", &v2, &plain())
        .await
        .unwrap();
    serving(&host, &oci::digest(&v2), "the tag's new version").await;

    // The tag moves to something that is no plugin: refused, and the
    // version serving keeps serving.
    push_raw(
        &reference,
        WASM_CONFIG,
        &[(WASM_LAYER, b"\0asm\x0d\0\x01\0broken")],
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(host.serving_digest("hostpath"), Some(oci::digest(&v2)));

    // A digest reference pins that version, whatever the tag does.
    let pinned = registry.reference(&format!("plugins/hostpath@{v2_manifest}"));
    let pinned_cache = tempfile::tempdir().unwrap();
    let (pinned_host, _policy) =
        host_of(&pinned, pinned_cache.path(), &plain_http(&registry)).await;
    assert_eq!(
        pinned_host.serving_digest("hostpath"),
        Some(oci::digest(&v2))
    );

    // The registry goes; a host starting now serves the last good version
    // from its disk cache.
    let registries = plain_http(&registry);
    drop(registry);
    let (restarted, _policy) = host_of(&reference, cache.path(), &registries).await;
    serving(
        &restarted,
        &oci::digest(&v2),
        "the cached version, registry gone",
    )
    .await;
}

/// A `.dockerconfigjson` holding `user`'s `password` for `registry`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_when_the_tag_moves_finishes_on_the_version_it_started_with() {
    use support::{claim, class, guest_path, options, MISBEHAVE_OUTPUT, OK_PREOPEN};
    use wasmprov::provisioner::Provisioner;
    let registry = Registry::start();
    let reference = registry.reference("plugins/slow:stable");
    let slow = std::fs::read(guest_path("misbehave")).unwrap();
    let [v1, v2] = ["1", "2"].map(|tag| support::variant(&slow, tag));
    oci::push(&reference, "slow", &v1, &plain()).await.unwrap();
    support::ok_preopen();
    let cache = tempfile::tempdir().unwrap();
    let policy = format!(
        "plugins:\n  slow:\n    image: {{reference: {reference}, pollInterval: 1s}}\n    \
         timeout: 30s\n    preopens: [{OK_PREOPEN}]\n    output: {MISBEHAVE_OUTPUT}\n\
         registries:\n{}",
        plain_http(&registry)
    );
    let (host, _policy) = host_with(&policy, cache.path()).await;
    serving_as(&host, "slow", &oci::digest(&v1), "v1 by tag").await;
    let made_by = |pv: &k8s_openapi::api::core::v1::PersistentVolume| {
        pv.metadata.annotations.as_ref().unwrap()["wasmprov.io/plugin-digest"].clone()
    };

    // A call that takes seconds is running when the tag moves.
    let in_flight = tokio::spawn({
        let host = host.clone();
        async move {
            let opts = options(
                "pvc-long",
                class("c", &[("behavior", "spin"), ("spin-ms", "8000")]),
                claim("long", "1Mi"),
            );
            host.provision("slow", &opts).await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    oci::push(&reference, "slow", &v2, &plain()).await.unwrap();
    serving_as(&host, "slow", &oci::digest(&v2), "v2 once the tag moved").await;
    assert!(
        !in_flight.is_finished(),
        "the reload came after the call ended"
    );
    let opts = options(
        "pvc-after",
        class("c", &[("behavior", "ok")]),
        claim("after", "1Mi"),
    );
    let after = host.provision("slow", &opts).await.unwrap();
    assert_eq!(made_by(&after), oci::digest(&v2), "new calls get v2");
    let long = in_flight
        .await
        .unwrap()
        .expect("the call in flight succeeds");
    assert_eq!(
        made_by(&long),
        oci::digest(&v1),
        "the call in flight finished on the version it started with"
    );
}

fn dockerconfigjson(registry: &str, user: &str, password: &str) -> String {
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!(r#"{{"auths":{{"{registry}":{{"auth":"{auth}"}}}}}}"#)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_logs_in_with_a_mounted_secret_and_follows_its_rotation() {
    let registry = Registry::with_login("host", "right");
    let component = std::fs::read(rust_plugin_path("hostpath")).unwrap();
    let reference = registry.reference("private/hostpath:1");
    let author = Access {
        plain_http: true,
        credentials: Some(("host".into(), "right".into())),
        ..Default::default()
    };
    oci::push(&reference, "hostpath", &component, &author)
        .await
        .unwrap();
    // The Secret as mounted, with a stale password first.
    let secret = tempfile::tempdir().unwrap();
    let file = secret.path().join(".dockerconfigjson");
    std::fs::write(&file, dockerconfigjson(&registry.addr, "host", "stale")).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let registries = format!(
        "  {}: {{plainHttp: true, credentials: {}}}\n",
        registry.addr,
        file.display()
    );
    let (host, _policy) = host_of(&reference, cache.path(), &registries).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        host.serving_digest("hostpath"),
        None,
        "served with a stale login"
    );
    // The Secret is rotated: the next look uses the new login.
    std::fs::write(&file, dockerconfigjson(&registry.addr, "host", "right")).unwrap();
    serving(&host, &oci::digest(&component), "after the rotation").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_signed_by_a_private_authority_is_trusted_once_told() {
    let (registry, ca_dir) = Registry::with_private_ca();
    let ca = ca_dir.path().join("ca.crt");
    let reference = registry.reference("private-ca/hostpath:1");
    let plugin = rust_plugin_path("hostpath");

    // Not trusted by default, and never downgraded to plain HTTP.
    let out = wasmprov(&["plugin", "push", plugin.to_str().unwrap(), &reference]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("UnknownIssuer") && text(&out).contains("caFile"),
        "an unknown authority names the fix: {}",
        text(&out)
    );
    let out = wasmprov(&[
        "plugin",
        "push",
        plugin.to_str().unwrap(),
        &reference,
        "--ca-file",
        ca.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));

    // A host is told by its policy.
    let cache = tempfile::tempdir().unwrap();
    let registries = format!("  {}: {{caFile: {}}}\n", registry.addr, ca.display());
    let (host, _policy) = host_of(&reference, cache.path(), &registries).await;
    let component = std::fs::read(&plugin).unwrap();
    serving(&host, &oci::digest(&component), "over HTTPS with the CA").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mirrors_are_asked_first_and_serve_when_the_registry_is_gone() {
    let origin = Registry::start();
    let mirror = Registry::start();
    let v1 = std::fs::read(rust_plugin_path("hostpath")).unwrap();
    let v2 = support::variant(&v1, "mirrored");
    let reference = origin.reference("plugins/hostpath:stable");
    oci::push(&reference, "hostpath", &v1, &plain())
        .await
        .unwrap();
    let registries = format!(
        "  {origin}: {{plainHttp: true, mirrors: [{mirror}]}}\n  {mirror}: {{plainHttp: true}}\n",
        origin = origin.addr,
        mirror = mirror.addr
    );

    // The mirror does not have it yet: the registry itself serves.
    let cache = tempfile::tempdir().unwrap();
    let (host, _policy) = host_of(&reference, cache.path(), &registries).await;
    serving(&host, &oci::digest(&v1), "from the registry").await;

    // The mirror gets a newer copy (as an air-gapped cluster's copy is
    // made, the same repository on another host) and the registry goes:
    // the mirror is asked first and serves it.
    let copy = format!("{}/plugins/hostpath:stable", mirror.addr);
    oci::push(&copy, "hostpath", &v2, &plain()).await.unwrap();
    drop(origin);
    serving(&host, &oci::digest(&v2), "from the mirror").await;

    // A mirror's copy whose bytes do not match its digest is refused as
    // the registry's own would be: made under another tag, damaged, then
    // tagged as the one the host follows.
    let v3 = support::variant(&v1, "tampered");
    let staging = format!("{}/plugins/hostpath:staging", mirror.addr);
    oci::push(&staging, "hostpath", &v3, &plain())
        .await
        .unwrap();
    std::fs::write(mirror.blob(&oci::digest(&v3)), &v1).unwrap();
    retag(&staging, &copy).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        host.serving_digest("hostpath"),
        Some(oci::digest(&v2)),
        "a tampered copy from the mirror was served"
    );
}

/// The release key a policy trusts and a stranger's, with their public
/// keys written as cosign writes `cosign.pub`.
struct SigningKeys {
    release: cosign::Key,
    release_pub: std::path::PathBuf,
    stranger: cosign::Key,
    stranger_pub: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl SigningKeys {
    fn new() -> Self {
        let (release, stranger) = (cosign::Key::new(1), cosign::Key::new(2));
        let _dir = tempfile::tempdir().unwrap();
        let release_pub = _dir.path().join("release.pub");
        let stranger_pub = _dir.path().join("stranger.pub");
        std::fs::write(&release_pub, release.public_pem()).unwrap();
        std::fs::write(&stranger_pub, stranger.public_pem()).unwrap();
        SigningKeys {
            release,
            release_pub,
            stranger,
            stranger_pub,
            _dir,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn only_versions_signed_by_the_policys_keys_are_served() {
    let registry = Registry::start();
    let SigningKeys {
        release,
        release_pub,
        stranger,
        stranger_pub,
        _dir,
    } = SigningKeys::new();
    let repository = registry.reference("signed/hostpath");
    let reference = format!("{repository}:stable");
    let v1 = std::fs::read(rust_plugin_path("hostpath")).unwrap();
    let [v2, v3, v4] = ["v2", "v3", "v4"].map(|tag| support::variant(&v1, tag));
    let policy_with =
        |key: &std::path::Path| format!("{reference}, signature: {{keys: [{}]}}", key.display());

    // Signed as cosign 2 signs: served, and `plugin pull --key` agrees.
    let v1_manifest = oci::push(&reference, "hostpath", &v1, &plain())
        .await
        .unwrap();
    cosign::sign_v2(&repository, &v1_manifest, &v1_manifest, &release).await;
    let cache = tempfile::tempdir().unwrap();
    let registries = plain_http(&registry);
    let (host, _policy) = host_of(&policy_with(&release_pub), cache.path(), &registries).await;
    serving(&host, &oci::digest(&v1), "a version signed by the key").await;
    let out_dir = tempfile::tempdir().unwrap();
    let pull = |key: &std::path::Path| {
        wasmprov(&[
            "plugin",
            "pull",
            &reference,
            "--plain-http",
            "--key",
            key.to_str().unwrap(),
            "-o",
            out_dir.path().join("p.wasm").to_str().unwrap(),
        ])
    };
    let out = pull(&release_pub);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("signature: verified with") && text(&out).contains("cosign 2"),
        "{}",
        text(&out)
    );
    let out = pull(&stranger_pub);
    assert!(!out.status.success());
    assert!(
        text(&out).contains(&format!(
            "no signature of {v1_manifest} by {}",
            stranger_pub.display()
        )) && text(&out).contains("a signature by another key")
            && text(&out).contains("cosign sign --key"),
        "{}",
        text(&out)
    );

    // Each of these moves of the tag is refused, and v1 keeps serving:
    // no signature; a cosign 3 bundle by another key; a cosign 2
    // signature and a cosign 3 bundle by the key, of another manifest.
    let v2_manifest = oci::push(&reference, "hostpath", &v2, &plain())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        host.serving_digest("hostpath"),
        Some(oci::digest(&v1)),
        "unsigned"
    );
    cosign::sign_v3(&repository, &v2_manifest, &v2_manifest, &stranger).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        host.serving_digest("hostpath"),
        Some(oci::digest(&v1)),
        "another key"
    );
    let v3_manifest = oci::push(&reference, "hostpath", &v3, &plain())
        .await
        .unwrap();
    cosign::sign_v2(&repository, &v3_manifest, &v1_manifest, &release).await;
    cosign::sign_v3(&repository, &v3_manifest, &v1_manifest, &release).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        host.serving_digest("hostpath"),
        Some(oci::digest(&v1)),
        "another manifest"
    );

    // Signed by the key as cosign 3 signs: served.
    let v4_manifest = oci::push(&reference, "hostpath", &v4, &plain())
        .await
        .unwrap();
    cosign::sign_v3(&repository, &v4_manifest, &v4_manifest, &release).await;
    serving(&host, &oci::digest(&v4), "a version with the key's bundle").await;

    // The registry goes. A host restarting serves the cached version while
    // the key that vouched for it is still trusted, and nothing once the
    // policy trusts another key only.
    drop(registry);
    let (restarted, _policy) = host_of(&policy_with(&release_pub), cache.path(), &registries).await;
    serving(&restarted, &oci::digest(&v4), "cached, key still trusted").await;
    let (distrusting, _policy) =
        host_of(&policy_with(&stranger_pub), cache.path(), &registries).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        distrusting.serving_digest("hostpath"),
        None,
        "cached, key no longer trusted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_version_serving_is_checked_again_when_the_signature_keys_change() {
    use wasmprov::provisioner::Provisioner;
    let registry = Registry::start();
    let SigningKeys {
        release,
        release_pub,
        stranger_pub,
        _dir,
        ..
    } = SigningKeys::new();
    let repository = registry.reference("rekeyed/hostpath");
    let reference = format!("{repository}:stable");
    let v1 = std::fs::read(rust_plugin_path("hostpath")).unwrap();
    let v1_manifest = oci::push(&reference, "hostpath", &v1, &plain())
        .await
        .unwrap();
    let registries = plain_http(&registry);
    let cache = tempfile::tempdir().unwrap();
    // Unsigned, and no signature required: served.
    let (host, policy_dir) = host_of(&reference, cache.path(), &registries).await;
    serving(&host, &oci::digest(&v1), "no signature required").await;
    let trusting = |keys: &[&std::path::Path]| {
        let keys: Vec<String> = keys.iter().map(|k| k.display().to_string()).collect();
        let policy = format!(
            "plugins:\n  hostpath:\n    image: {{reference: {reference}, pollInterval: 1s, \
             signature: {{keys: [{}]}}}}\nregistries:\n{registries}",
            keys.join(", ")
        );
        std::fs::write(policy_dir.path().join("policy.yaml"), policy).unwrap();
    };
    let withdrawn = |what: &'static str| {
        let host = host.clone();
        async move {
            let started = Instant::now();
            while host.serving_digest("hostpath").is_some() {
                assert!(started.elapsed() < Duration::from_secs(60), "{what}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            host.plugin("hostpath").unwrap_err()
        }
    };

    // A key is required now: the unsigned version serving is withdrawn,
    // and a claim is told why.
    trusting(&[&release_pub]);
    let told = withdrawn("a key is required and the version is unsigned").await;
    assert!(
        told.contains(&format!("its version {v1_manifest}"))
            && told.contains(
                "is not signed by a key plugins.hostpath.image.signature.keys trusts now"
            ),
        "{told}"
    );
    // Once signed with that key, the same version serves again.
    cosign::sign_v2(&repository, &v1_manifest, &v1_manifest, &release).await;
    serving(&host, &oci::digest(&v1), "signed with the key now").await;
    // The key that vouched for it is no longer trusted: withdrawn again.
    trusting(&[&stranger_pub]);
    withdrawn("its key was removed").await;
    // Trusted again beside another key: served.
    trusting(&[&stranger_pub, &release_pub]);
    serving(&host, &oci::digest(&v1), "its key trusted again").await;
    // A key added beside the one that vouched for it changes nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(host.serving_digest("hostpath"), Some(oci::digest(&v1)));
}

#[tokio::test]
async fn an_image_for_image_volumes_holds_the_plugins_at_its_root() {
    let registry = Registry::start();
    let reference = registry.reference("plugins/volume:1");
    let hostpath = rust_plugin_path("hostpath");
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.wasm");
    std::fs::write(
        &other,
        support::variant(&std::fs::read(&hostpath).unwrap(), "other"),
    )
    .unwrap();
    let (hostpath, other) = (hostpath.to_str().unwrap(), other.to_str().unwrap());

    // One artifact is one component.
    let out = wasmprov(&[
        "plugin",
        "push",
        hostpath,
        other,
        &reference,
        "--plain-http",
    ]);
    assert!(!out.status.success());
    assert!(text(&out).contains("2 files given"), "{}", text(&out));

    let out = wasmprov(&[
        "plugin",
        "push",
        "--image",
        hostpath,
        other,
        &reference,
        "--plain-http",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("an image holding hostpath.wasm, other.wasm"),
        "{}",
        text(&out)
    );

    // An image as containerd unpacks one: an image config whose diff_id
    // is the tar's, one gzip tar layer with the files at its root.
    let client = raw_client();
    let image: Reference = reference.parse().unwrap();
    let (body, _) = client
        .pull_manifest_raw(
            &image,
            &RegistryAuth::Anonymous,
            &[oci_client::manifest::OCI_IMAGE_MEDIA_TYPE],
        )
        .await
        .unwrap();
    let manifest: OciImageManifest = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        manifest.config.media_type,
        oci_client::manifest::IMAGE_CONFIG_MEDIA_TYPE
    );
    let [layer] = manifest.layers.as_slice() else {
        panic!("{manifest:?}")
    };
    assert_eq!(
        layer.media_type,
        oci_client::manifest::IMAGE_LAYER_GZIP_MEDIA_TYPE
    );
    let mut gz = Vec::new();
    client.pull_blob(&image, layer, &mut gz).await.unwrap();
    let mut tar = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gz.as_slice()), &mut tar).unwrap();
    let mut config = Vec::new();
    client
        .pull_blob(&image, &manifest.config, &mut config)
        .await
        .unwrap();
    let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
    assert_eq!(config["rootfs"]["diff_ids"][0], oci::digest(&tar));
    let mut files = Vec::new();
    for entry in tar::Archive::new(tar.as_slice()).entries().unwrap() {
        let mut entry = entry.unwrap();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
        files.push((
            entry.path().unwrap().display().to_string(),
            oci::digest(&bytes),
        ));
    }
    assert_eq!(
        files,
        [
            (
                "hostpath.wasm".to_owned(),
                oci::digest(&std::fs::read(hostpath).unwrap())
            ),
            (
                "other.wasm".to_owned(),
                oci::digest(&std::fs::read(other).unwrap())
            ),
        ]
    );

    // A host does not pull it: the kubelet mounts it.
    let error = oci::pull(&reference, &plain(), Limits::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("is mounted by the kubelet"), "{error}");
}

/// A registry that answers every manifest request with more bytes than
/// any manifest may have: with a Content-Length of 100 MiB (`announce`),
/// or streamed without one. Returns its address and a count of the
/// manifest bytes it managed to send.
async fn endless_manifests(
    announce: bool,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if socket.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head);
                if !head.contains("/manifests/") {
                    let _ = socket
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                        .await;
                    return;
                }
                let length = if announce {
                    "Content-Length: 104857600\r\n"
                } else {
                    "Transfer-Encoding: chunked\r\n"
                };
                let header = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\n{length}\r\n"
                );
                if socket.write_all(header.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b' '; 64 << 10];
                for _ in 0..1600 {
                    let framed = if announce {
                        chunk.clone()
                    } else {
                        [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat()
                    };
                    if socket.write_all(&framed).await.is_err() {
                        return;
                    }
                    counter.fetch_add(chunk.len(), Ordering::Relaxed);
                }
            });
        }
    });
    (addr, sent)
}

#[tokio::test]
async fn a_manifest_larger_than_allowed_is_not_read() {
    use std::sync::atomic::Ordering;
    for announce in [true, false] {
        let (addr, sent) = endless_manifests(announce).await;
        let reference = format!("{addr}/evil/plugin:1");
        let error = oci::pull(&reference, &plain(), Limits::default())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("its manifest is larger than the 4194304 bytes a manifest may have"),
            "{error}"
        );
        // Socket buffers hold a few MiB more than was read; the registry
        // offered 100 MiB.
        let sent = sent.load(Ordering::Relaxed);
        assert!(sent < 16 << 20, "announced: {announce}; sent {sent} bytes");
    }
}

/// What a user of a published plugin sees: claims bind through the version
/// the tag names, and through the next one once the tag moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_bind_through_a_plugin_pulled_from_a_registry() {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    use kube::api::{Api, PostParams};
    let registry = Registry::start();
    let v1 = std::fs::read(rust_plugin_path("hostpath")).unwrap();
    let v2 = support::variant(&v1, "published-v2");
    let reference = registry.reference("plugins/hostpath:stable");
    oci::push(&reference, "hostpath", &v1, &plain())
        .await
        .unwrap();
    let volumes = tempfile::tempdir().unwrap();
    let dir = volumes.path().display();
    let cache = tempfile::tempdir().unwrap();
    let (host, _policy) = host_with(
        &format!(
            "plugins:\n  hostpath:\n    image: {{reference: {reference}, pollInterval: 1s}}\n    \
             preopens: [{{host: {dir}, guest: /volumes, mode: read-write}}]\n    \
             output: {{sources: [hostPath], paths: [{dir}]}}\n    recordParameters: [hostRoot]\n\
             registries:\n{}",
            plain_http(&registry)
        ),
        cache.path(),
    )
    .await;

    let sim = kube_sim::Simulator::start(kube_sim::Config::default())
        .await
        .unwrap();
    let client = sim.client().unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(wasmprov::lifecycle::run(
        client.clone(),
        host.clone(),
        wasmprov::lifecycle::Config::new("wasmprov.io/host"),
        std::sync::Arc::new(wasmprov::metrics::Metrics::default()),
        async move {
            let _ = stopped.await;
        },
    ));
    let mut class = support::class(
        "published",
        &[("plugin", "hostpath"), ("hostRoot", &dir.to_string())],
    );
    class.volume_binding_mode = Some("Immediate".into());
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let volumes_api: Api<PersistentVolume> = Api::all(client.clone());
    let bound_by = |name: &'static str| {
        let (claims, volumes_api) = (claims.clone(), volumes_api.clone());
        async move {
            let mut claim = support::claim(name, "1Mi");
            claim.metadata.uid = None;
            claim.spec.as_mut().unwrap().storage_class_name = Some("published".into());
            claims.create(&PostParams::default(), &claim).await.unwrap();
            support::eventually(&format!("claim {name} to bind"), || async {
                let claim = claims.get(name).await.ok()?;
                let volume = claim.spec?.volume_name?;
                let volume = volumes_api.get(&volume).await.ok()?;
                volume
                    .metadata
                    .annotations?
                    .get("wasmprov.io/plugin-digest")
                    .cloned()
            })
            .await
        }
    };
    assert_eq!(bound_by("first").await, oci::digest(&v1));

    oci::push(&reference, "hostpath", &v2, &plain())
        .await
        .unwrap();
    serving(&host, &oci::digest(&v2), "the moved tag's version").await;
    assert_eq!(bound_by("second").await, oci::digest(&v2));
}
