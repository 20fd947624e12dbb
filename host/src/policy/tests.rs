use super::*;

fn parse(yaml: &str) -> Result<PolicySet, PolicyError> {
    PolicySet::parse(yaml, Path::new("policy.yaml"))
}

#[test]
fn an_empty_policy_grants_nothing_beyond_the_defaults() {
    let set = parse("").unwrap();
    let p = set.sandbox_for("anything");
    assert_eq!(p, SandboxPolicy::default());
    assert!(p.preopens.is_empty() && p.allowed_outbound.is_empty());
}

#[test]
fn plugin_entries_override_the_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "defaults: {{memoryLimit: 32Mi, timeout: 2s}}\n\
         plugins:\n  hostpath:\n    timeout: 500ms\n    maxConcurrentCalls: 9\n    \
         preopens: [{{host: {}, guest: /volumes, mode: read-write}}]\n    \
         allowedOutbound: [\"127.0.0.1:2049\"]\n",
        dir.path().display()
    );
    let set = parse(&yaml).unwrap();
    let p = set.sandbox_for("hostpath");
    assert_eq!(p.memory_limit, 32 << 20);
    assert_eq!(p.timeout, Duration::from_millis(500));
    assert_eq!(p.max_concurrent_calls, 9);
    assert_eq!(p.preopens[0].mode, DirMode::ReadWrite);
    assert_eq!(p.allowed_outbound, vec!["127.0.0.1:2049".parse().unwrap()]);
    let other = set.sandbox_for("other");
    assert_eq!(other.timeout, Duration::from_secs(2));
    assert!(other.preopens.is_empty());
}

#[test]
fn mistakes_are_reported_with_the_field_and_the_fix() {
    let cases = [
        (
            "plugins: {a: {memoryLimt: 1Gi}}",
            "unknown field `memoryLimt`",
        ),
        ("plugins: {a: {memoryLimit: lots}}", "plugins.a.memoryLimit"),
        ("plugins: {a: {memoryLimit: 1Ki}}", "1Mi minimum"),
        ("plugins: {a: {timeout: forever}}", "plugins.a.timeout"),
        ("plugins: {a: {timeout: 0s}}", "greater than 0"),
        ("plugins: {a: {maxConcurrentCalls: 0}}", "at least 1"),
        ("defaults: {preopens: []}", "unknown field `preopens`"),
        (
            "plugins: {a: {preopens: [{host: relative, guest: /x}]}}",
            "absolute path",
        ),
        (
            "plugins: {a: {preopens: [{host: /no/such/dir/anywhere, guest: /x}]}}",
            "create it or fix the path",
        ),
        (
            "plugins: {a: {preopens: [{host: /tmp, guest: /x/../y}]}}",
            "plugins.a.preopens[0].guest",
        ),
        (
            "plugins: {a: {preopens: [{host: /tmp, guest: /x, mode: rw}]}}",
            "unknown variant `rw`",
        ),
        (
            "plugins: {a: {allowedOutbound: [\"nfs.example:2049\"]}}",
            "host names are not resolved",
        ),
        (
            "plugins: {a: {secretParameters: [plugin]}}",
            "plugins.a.secretParameters[0]",
        ),
        (
            "plugins: {a: {recordParameters: [plugin]}}",
            "plugins.a.recordParameters[0]",
        ),
        (
            "plugins: {a: {runsOn: nodes}}",
            "unknown variant `nodes`, expected `central` or `node`",
        ),
        (
            "plugins: {a: {runsOn: node}}",
            "plugins.a.output.paths: plugins.a.runsOn is node, but the plugin is granted no node directory",
        ),
        (
            "plugins: {a: {runsOn: node, output: {sources: [hostPath, nfs], paths: [/tmp]}}}",
            "plugins.a.output.sources[1]: nfs is not node-local storage",
        ),
        (
            "plugins: {a: {runsOn: node, output: {sources: [hostPath], uncheckedSources: [iscsi], paths: [/tmp]}}}",
            "plugins.a.output.uncheckedSources[0]: iscsi is not node-local storage",
        ),
        (
            "plugins: {a: {secretParameters: [password], recordParameters: [server, password]}}",
            "plugins.a.recordParameters[1]: \"password\" is also listed under plugins.a.secretParameters, which are never written on a volume; remove it from one of the two",
        ),
    ];
    for (yaml, want) in cases {
        let err = parse(yaml).expect_err(yaml).to_string();
        assert!(err.contains("policy.yaml"), "{err}");
        assert!(err.contains(want), "{yaml}: {err}");
    }
}

#[test]
fn only_the_granted_parameters_are_recorded_and_never_a_secret() {
    let set = parse(
        "plugins:\n  some: {recordParameters: [server]}\n  \
         all: {recordParameters: [\"*\"], secretParameters: [password]}\n",
    )
    .unwrap();
    let some = set.output_for("some");
    assert!(some.records("server"));
    assert!(!some.records("password") && !some.records("other"));
    let all = set.output_for("all");
    assert!(all.records("server") && all.records("anything"));
    assert!(
        !all.records("password"),
        "a secret is never recorded, even under *"
    );
    assert!(
        !set.output_for("unlisted").records("server"),
        "nothing is recorded by default"
    );
}

#[test]
fn a_report_of_the_whole_chain_says_each_mistake_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.yaml");
    for (err, want) in [
        (
            parse("plugins: {a: {memoryLimt: 1Gi}}").unwrap_err(),
            "unknown field `memoryLimt`",
        ),
        (PolicySet::load(&missing).unwrap_err(), "No such file"),
    ] {
        let report = format!("{:#}", anyhow::Error::from(err));
        assert_eq!(report.matches(want).count(), 1, "{report}");
    }
}

#[test]
fn each_side_serves_its_own_plugins_and_leaves_the_others_directories_alone() {
    let dir = tempfile::tempdir().unwrap();
    let here = dir.path().display();
    // The node directory exists on nodes only: a central host must not
    // look for it, and a node host must not look for central grants.
    let yaml = format!(
        "plugins:\n  \
         hostpath:\n    runsOn: node\n    \
           preopens: [{{host: /var/lib/no-such-node-dir, guest: /volumes, mode: read-write}}]\n    \
           output: {{sources: [hostPath], paths: [/var/lib/no-such-node-dir]}}\n  \
         nfs:\n    preopens: [{{host: {here}, guest: /exports, mode: read-write}}]\n    \
           output: {{sources: [nfs], nfsExports: ['10.0.0.5:/exports']}}\n"
    );
    let central = parse(&yaml).unwrap();
    assert!(central.serves("nfs").is_ok());
    assert!(
        central.serves("unlisted").is_ok(),
        "central serves plugins without an entry"
    );
    let refusal = central.serves("hostpath").unwrap_err();
    assert!(
        refusal.contains("plugin hostpath is served by node hosts (runsOn: node)")
            && refusal.contains("plugins.hostpath.runsOn"),
        "{refusal}"
    );

    let node_yaml = yaml.replace("/var/lib/no-such-node-dir", &here.to_string());
    let node_yaml = node_yaml.replace(
        &format!("host: {here}, guest: /exports"),
        "host: /no/such/central/dir, guest: /exports",
    );
    let node = PolicySet::parse_for(&node_yaml, Path::new("policy.yaml"), RunsOn::Node).unwrap();
    assert!(node.serves("hostpath").is_ok());
    assert_eq!(
        node.output_for("hostpath").paths,
        vec![dir.path().canonicalize().unwrap()]
    );
    assert!(node
        .serves("nfs")
        .unwrap_err()
        .contains("served by central hosts"));
    let unlisted = node.serves("unlisted").unwrap_err();
    assert!(
        unlisted.contains("add plugins.unlisted with runsOn: node"),
        "{unlisted}"
    );
    // The other side's mistakes are still mistakes here.
    let bad = node_yaml.replace("sources: [nfs]", "sources: [nfs], bogus: 1");
    assert!(PolicySet::parse_for(&bad, Path::new("policy.yaml"), RunsOn::Node).is_err());
}
