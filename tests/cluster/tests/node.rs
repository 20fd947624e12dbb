//! The real node: a pod runs from a locally loaded image with a hostPath
//! volume, and stopping the cluster leaves nothing behind on the machine
//! (no container, mount, cgroup or network interface). Several nodes: each
//! runs pods, and sees its own private directories, never another's.

use std::path::Path;
use std::time::{Duration, Instant};

use test_cluster::{node_name, Cluster, NodeOptions, Options, NODE_NAME};

fn kubectl(cluster: &Cluster, args: &[&str]) -> String {
    let out = cluster.kubectl().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl apply -f -` of `object` (JSON or YAML).
fn apply(cluster: &Cluster, object: &str) {
    let mut apply = cluster.kubectl();
    apply
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped());
    let mut child = apply.spawn().unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), object.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn mounts_below(dir: &Path) -> Vec<String> {
    let dir = dir.display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.split(' ').nth(4).is_some_and(|p| p.starts_with(&dir)))
        .map(str::to_owned)
        .collect()
}

fn processes_naming(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&needle))
        .collect()
}

#[test]
fn a_pod_runs_on_the_node_and_stopping_leaves_nothing_behind() {
    let cluster = Cluster::start(Options {
        node: Some(NodeOptions::default()),
        ..Options::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let dir = cluster.dir().to_owned();
    // https://ADDRESS:PORT: the machine's end of the node's link.
    let link_ip = cluster
        .url()
        .rsplit_once(':')
        .unwrap()
        .0
        .trim_start_matches("https://")
        .to_owned();
    let cgroup = format!("wasmprov-{}", dir.file_name().unwrap().to_string_lossy());

    let host_dir = tempfile::tempdir().unwrap();
    let pod = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"sleeper","namespace":"default"}},
            "spec":{{"containers":[{{"name":"pause","image":"localhost/wasmprov-test/pause:1",
              "imagePullPolicy":"Never","volumeMounts":[{{"name":"data","mountPath":"/data"}}]}}],
            "volumes":[{{"name":"data","hostPath":{{"path":"{}"}}}}]}}}}"#,
        host_dir.path().display()
    );
    apply(&cluster, &pod);

    wait_for("the pod to run", Duration::from_secs(120), || {
        kubectl(
            &cluster,
            &["get", "pod", "sleeper", "-o", "jsonpath={.status.phase}"],
        ) == "Running"
    });
    assert_eq!(
        kubectl(
            &cluster,
            &["get", "pod", "sleeper", "-o", "jsonpath={.spec.nodeName}"]
        ),
        NODE_NAME
    );
    let ip = kubectl(
        &cluster,
        &["get", "pod", "sleeper", "-o", "jsonpath={.status.podIP}"],
    );
    assert!(ip.starts_with("10.244."), "pod IP {ip}");
    let tasks =
        String::from_utf8(cluster.ctr().args(["tasks", "ls"]).output().unwrap().stdout).unwrap();
    assert!(tasks.contains("RUNNING"), "ctr tasks ls:\n{tasks}");
    assert!(!mounts_below(&dir).is_empty(), "a running pod has mounts");
    assert!(
        Path::new("/sys/fs/cgroup/pids").join(&cgroup).exists()
            || Path::new("/sys/fs/cgroup").join(&cgroup).exists(),
        "the node's cgroup tree"
    );

    drop(cluster);
    nothing_left_behind(&dir);
    let addrs = std::process::Command::new("ip")
        .args(["-o", "addr"])
        .output()
        .unwrap();
    let addrs = String::from_utf8_lossy(&addrs.stdout);
    assert!(
        !addrs.contains(&format!("{link_ip}/")),
        "the node's link is left:\n{addrs}"
    );
    assert!(
        host_dir.path().exists(),
        "the hostPath directory itself is untouched"
    );
}

/// A cluster whose process was killed leaves its pods' containers and
/// mounts behind (containerd's shims detach); the next start in the same
/// directory removes them.
#[test]
fn a_killed_clusters_containers_are_swept_by_the_next_start() {
    let dir = test_cluster::target_dir().join("test-clusters/killed-node");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    let mut person = std::process::Command::new(env!("CARGO_BIN_EXE_test-cluster"))
        .arg("--node")
        .arg("--dir")
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(person.stdout.as_mut().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert!(ready.contains("ready"), "test-cluster said {ready:?}");
    let kubectl = |args: &[&str]| {
        let out = std::process::Command::new(test_cluster::binaries().unwrap().join("kubectl"))
            .arg("--kubeconfig")
            .arg(dir.join("kubeconfig"))
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    kubectl(&[
        "run",
        "left-behind",
        "--image=localhost/wasmprov-test/pause:1",
        "--image-pull-policy=Never",
    ]);
    wait_for("the pod to run", Duration::from_secs(120), || {
        kubectl(&[
            "get",
            "pod",
            "left-behind",
            "-o",
            "jsonpath={.status.phase}",
        ]) == "Running"
    });
    person.kill().unwrap();
    person.wait().unwrap();
    // Its processes die with it; the shims and their containers do not.
    std::thread::sleep(Duration::from_secs(1));
    assert!(!processes_naming(&dir).is_empty(), "the shims outlive it");
    assert!(
        !mounts_below(&dir).is_empty(),
        "the pod's mounts outlive it"
    );

    let cluster = Cluster::start(Options {
        dir: Some(dir.clone()),
        ..Options::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let shims: Vec<String> = processes_naming(&dir)
        .into_iter()
        .filter(|p| p.contains("containerd-shim"))
        .collect();
    assert_eq!(shims, Vec::<String>::new(), "shims left");
    assert_eq!(mounts_below(&dir), Vec::<String>::new(), "mounts left");
    drop(cluster);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A pause pod on node `node` mounting `path` as a hostPath volume.
fn pinned_pod(cluster: &Cluster, name: &str, node: &str, path: &Path) {
    let pod = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"default"}},
            "spec":{{"nodeName":"{node}","containers":[{{"name":"pause","image":"localhost/wasmprov-test/pause:1",
              "imagePullPolicy":"Never","volumeMounts":[{{"name":"data","mountPath":"/data"}}]}}],
            "volumes":[{{"name":"data","hostPath":{{"path":"{}","type":"Directory"}}}}]}}}}"#,
        path.display()
    );
    apply(cluster, &pod);
}

#[test]
fn two_nodes_run_pods_and_each_sees_only_its_own_private_directory() {
    let private = Path::new("/var/lib/wasmprov-cluster-test");
    let cluster = Cluster::start(Options {
        node: Some(NodeOptions {
            count: 2,
            private_paths: vec![private.to_owned()],
            ..NodeOptions::default()
        }),
        ..Options::default()
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let dir = cluster.dir().to_owned();
    let names = cluster.node_names();
    assert_eq!(names, [node_name(0), node_name(1)]);

    // A file made on the first node is that node's alone.
    let first = cluster.node_view(&names[0], private);
    let second = cluster.node_view(&names[1], private);
    std::fs::write(first.join("marker"), "first").unwrap();
    assert!(!second.join("marker").exists(), "the second node sees it");
    assert!(!private.join("marker").exists(), "the machine sees it");
    std::fs::write(second.join("marker"), "second").unwrap();
    assert_eq!(
        std::fs::read_to_string(first.join("marker")).unwrap(),
        "first"
    );

    // Each runs a pod mounting its own directory.
    for (i, node) in names.iter().enumerate() {
        pinned_pod(&cluster, &format!("on-{i}"), node, private);
    }
    for i in 0..names.len() {
        let pod = format!("on-{i}");
        wait_for(
            &format!("pod {pod} to run"),
            Duration::from_secs(120),
            || {
                kubectl(
                    &cluster,
                    &["get", "pod", &pod, "-o", "jsonpath={.status.phase}"],
                ) == "Running"
            },
        );
    }
    for node in &names {
        let tasks = String::from_utf8(
            cluster
                .ctr_on(node)
                .args(["tasks", "ls"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        assert!(tasks.contains("RUNNING"), "{node}: ctr tasks ls:\n{tasks}");
    }

    // The second node hangs, then is switched off: its processes and
    // containers are gone, what it kept stays on its disk, the first node
    // runs on.
    cluster.freeze_node(&names[1]);
    cluster.stop_node(&names[1]);
    let second_dir = dir.join("nodes").join(&names[1]);
    assert_eq!(
        processes_naming(&second_dir),
        Vec::<String>::new(),
        "processes of the stopped node"
    );
    assert_eq!(
        std::fs::read_to_string(second.join("marker")).unwrap(),
        "second"
    );
    let tasks =
        String::from_utf8(cluster.ctr().args(["tasks", "ls"]).output().unwrap().stdout).unwrap();
    assert!(
        tasks.contains("RUNNING"),
        "{}: ctr tasks ls:\n{tasks}",
        names[0]
    );

    drop(cluster);
    nothing_left_behind(&dir);
    assert!(!private.join("marker").exists());
}

/// What a stopped cluster whose run directory was `dir` must not leave on
/// the machine: mounts, processes, its nodes' cgroups, the directory.
fn nothing_left_behind(dir: &Path) {
    assert_eq!(mounts_below(dir), Vec::<String>::new(), "mounts left");
    assert_eq!(
        processes_naming(dir),
        Vec::<String>::new(),
        "processes left"
    );
    // Every node's cgroup tree, `wasmprov-<run>` and `wasmprov-<run>.node-<i>`,
    // in each v1 hierarchy (or in the v2 one).
    let run = dir.file_name().unwrap().to_string_lossy().into_owned();
    let base = Path::new("/sys/fs/cgroup");
    let hierarchies = std::fs::read_dir(base).unwrap().flatten().map(|h| h.path());
    let cgroups: Vec<_> = std::iter::once(base.to_owned())
        .chain(hierarchies)
        .flat_map(|h| std::fs::read_dir(h).into_iter().flatten().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("wasmprov-{run}")))
        .collect();
    assert!(cgroups.is_empty(), "cgroups left: {cgroups:?}");
    assert!(!dir.exists(), "{} left", dir.display());
}
