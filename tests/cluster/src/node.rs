//! A real node for the test control plane: containerd (with Debian's runc
//! and CNI plugins), kubelet and kube-proxy, running pods from images loaded
//! from local OCI tarballs.
//!
//! Each node lives in a network namespace of its own, joined to this
//! machine by a veth pair: its bridge, pod addresses and kube-proxy's
//! iptables rules vanish with the namespace when the node stops or the test
//! process dies, and nothing it does touches this machine's own network.
//! Files are this machine's, but for the node's private paths
//! ([`NodeOptions::private_paths`]): with them, the node also has a mount
//! namespace of its own in which each such path is a directory of the
//! node's (under the run directory), so that several nodes on one machine
//! never see each other's files there, as real nodes do not.
//!
//! What a node leaves on the machine while it runs, and how each goes:
//! - processes: kubelet, kube-proxy and containerd die with the test process
//!   (PR_SET_PDEATHSIG); containerd's shims detach, so [`sweep`] kills every
//!   process whose command line names the run directory;
//! - containers: in a cgroup tree of the run's own (kubelet's `cgroupRoot`),
//!   whose processes [`sweep`] kills before removing the tree;
//! - mounts (container root filesystems, pod volumes, network namespaces):
//!   all under the run directory, unmounted by [`sweep`] before anything in
//!   it is deleted, so no deletion ever follows a bind mount out.
//!
//! A run that died before its clean-up is swept by the next start.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::Component;
use crate::{io, write, Error};

/// The (first) node's name, also its `kubernetes.io/hostname` label.
pub const NODE_NAME: &str = "wasmprov-node";

/// The name of node `index` (0-based): [`NODE_NAME`], then
/// `wasmprov-node-2`, `wasmprov-node-3`, ….
pub fn node_name(index: usize) -> String {
    match index {
        0 => NODE_NAME.to_owned(),
        i => format!("{NODE_NAME}-{}", i + 1),
    }
}

/// The name the pause image is loaded under (containerd's sandbox image).
pub(crate) const PAUSE_IMAGE: &str = "localhost/wasmprov-test/pause:1";

/// How to start a node with the control plane.
#[derive(Debug, Clone, Default)]
pub struct NodeOptions {
    /// OCI image tarballs to load into each node's containerd before the
    /// kubelet starts (no registry is reachable: pods run only images loaded
    /// here or with [`crate::Cluster::load_image`]).
    pub images: Vec<PathBuf>,
    /// How many nodes (0 counts as 1), named by [`node_name`].
    pub count: usize,
    /// Absolute directories each node has of its own (e.g.
    /// `/var/lib/wasmprov`): in the node's mount namespace each is a
    /// directory under the run directory, empty at start; read a node's
    /// with [`crate::Cluster::node_view`]. Empty: every node sees this
    /// machine's files.
    pub private_paths: Vec<PathBuf>,
}

impl NodeOptions {
    pub fn count(&self) -> usize {
        self.count.max(1)
    }
}

/// The node's network namespace and its link to this machine, made before
/// the API server starts (which advertises the machine's end of the link).
pub(crate) struct Network {
    /// Holds the namespaces open: they live as long as this process.
    holder: Component,
    /// Whether the node has a mount namespace of its own.
    private_mounts: bool,
    /// The machine's end of the veth pair.
    host_if: String,
    /// The machine's end of the link (the API server's advertised address).
    pub host_ip: Ipv4Addr,
    /// The node's end: its InternalIP.
    pub node_ip: Ipv4Addr,
    /// Pod addresses on the node's bridge, routed from this machine through
    /// the link (so the API server reaches pods, as `kubectl get --raw
    /// …/pods/NAME:PORT/proxy/…` needs).
    pub pod_cidr: String,
}

impl Network {
    /// A fresh network namespace holding the node's end of a veth pair, and
    /// with `private_mounts` a mount namespace (a slave of this machine's:
    /// mounts made here reach it, none made there comes back).
    pub fn create(
        dir: &Path,
        pause: &Path,
        log_prefix: &str,
        private_mounts: bool,
    ) -> Result<Network, Error> {
        let logs = dir.join("logs");
        let mut args: Vec<String> = vec!["--net".into()];
        if private_mounts {
            args.extend(["--mount".into(), "--propagation".into(), "slave".into()]);
        }
        args.extend(["--".into(), pause.display().to_string()]);
        let holder = Component::spawn(
            "node-network",
            Path::new("unshare"),
            &args,
            logs.join(format!("{log_prefix}node-network.log")),
        )?;
        let pid = holder.pid();
        let mine = std::fs::read_link("/proc/self/ns/net").map_err(io("read /proc/self/ns/net"))?;
        let netns = format!("/proc/{pid}/ns/net");
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_link(&netns).ok().is_none_or(|ns| ns == mine) {
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    component: "node-network",
                    waited: Duration::from_secs(5),
                    what: "`unshare --net` to make a network namespace".into(),
                    log: holder.log.clone(),
                    tail: holder.log_excerpt(10),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }

        // Two nodes starting at once would pick the same addresses.
        let _lock = lock_file(&std::env::temp_dir().join("wasmprov-test-node-network.lock"))?;
        let subnet = free_link_subnet()?;
        let host_ip = Ipv4Addr::new(10, 201, subnet, 1);
        let node_ip = Ipv4Addr::new(10, 201, subnet, 2);
        let pod_cidr = format!("10.244.{subnet}.0/24");
        // Interface names are at most 15 bytes.
        let host_if = format!("wpn{pid}");
        let pid = pid.to_string();
        run(Command::new("ip").args([
            "link", "add", &host_if, "type", "veth", "peer", "name", "eth0", "netns", &pid,
        ]))?;
        run(Command::new("ip").args(["addr", "add", &format!("{host_ip}/30"), "dev", &host_if]))?;
        run(Command::new("ip").args(["link", "set", &host_if, "up"]))?;
        // Goes with the link.
        run(Command::new("ip").args([
            "route",
            "add",
            &pod_cidr,
            "via",
            &node_ip.to_string(),
            "dev",
            &host_if,
        ]))?;
        let inside = |args: &[&str]| {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={netns}")).arg("--").args(args);
            c
        };
        run(&mut inside(&["ip", "link", "set", "lo", "up"]))?;
        run(&mut inside(&[
            "ip",
            "addr",
            "add",
            &format!("{node_ip}/30"),
            "dev",
            "eth0",
        ]))?;
        run(&mut inside(&["ip", "link", "set", "eth0", "up"]))?;
        run(&mut inside(&[
            "ip",
            "route",
            "add",
            "default",
            "via",
            &host_ip.to_string(),
        ]))?;
        // Service traffic from pods is forwarded from the bridge to the link
        // (a sysctl of the namespace, not of this machine).
        run(&mut inside(&[
            "sysctl",
            "-q",
            "-w",
            "net.ipv4.ip_forward=1",
        ]))?;
        Ok(Network {
            holder,
            private_mounts,
            host_if,
            host_ip,
            node_ip,
            pod_cidr,
        })
    }

    /// `nsenter --net=… [--mount=…] -- binary`: a command that runs inside
    /// the node's namespaces.
    fn enter(&self, binary: &Path) -> (PathBuf, Vec<String>) {
        let pid = self.holder.pid();
        let mut args = vec![format!("--net=/proc/{pid}/ns/net")];
        if self.private_mounts {
            args.push(format!("--mount=/proc/{pid}/ns/mnt"));
        }
        args.extend(["--".into(), binary.display().to_string()]);
        (PathBuf::from("nsenter"), args)
    }

    /// Makes each of `paths` the node's own: `root/<path>` bound over
    /// `<path>` in its mount namespace (the path is made on this machine
    /// first, empty, as the mount point).
    fn bind_private(&self, root: &Path, paths: &[PathBuf]) -> Result<(), Error> {
        for path in paths {
            let own = root.join(path.strip_prefix("/").unwrap_or(path));
            for d in [path.as_path(), own.as_path()] {
                std::fs::create_dir_all(d).map_err(io(format!("create {}", d.display())))?;
            }
            run(Command::new("nsenter")
                .arg(format!("--mount=/proc/{}/ns/mnt", self.holder.pid()))
                .args(["--", "mount", "--bind"])
                .arg(&own)
                .arg(path))?;
        }
        Ok(())
    }
}

impl Network {
    /// Ends the namespace. It goes with its last process, but the kernel
    /// removes its links a moment later: remove the pair now, so the
    /// address is free once the cluster is gone.
    fn remove(&mut self) {
        if self.holder.exited().is_some() {
            return;
        }
        self.holder.stop(Duration::from_secs(1));
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.remove();
    }
}

/// An exclusive lock on `path` (flock), held until the file is dropped.
fn lock_file(path: &Path) -> Result<std::fs::File, Error> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(io(format!("open {}", path.display())))?;
    // SAFETY: flock(2) on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(io(format!("lock {}", path.display()))(
            std::io::Error::last_os_error(),
        ));
    }
    Ok(file)
}

/// N such that neither 10.201.N.0/30 (the link) nor 10.244.N.0/24 (the
/// pods) is in use on this machine.
fn free_link_subnet() -> Result<u8, Error> {
    let addrs = run(Command::new("ip").args(["-o", "-4", "addr", "show"]))?;
    let routes = run(Command::new("ip").args(["-4", "route", "show"]))?;
    (0..=255u8)
        .find(|n| {
            !addrs.contains(&format!("10.201.{n}.")) && !routes.contains(&format!("10.244.{n}."))
        })
        .ok_or_else(|| Error::Client {
            what: "choosing the node's link addresses".into(),
            message: "every 10.201.N.0/30 is in use on this machine".into(),
        })
}

/// Runs a setup command; its failure names the command and what it said.
fn run(command: &mut Command) -> Result<String, Error> {
    let what = format!("{command:?}");
    let out = command.output().map_err(io(format!("run {what}")))?;
    if !out.status.success() {
        return Err(Error::Client {
            what,
            message: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The running node.
pub(crate) struct Node {
    pub name: String,
    network: Network,
    /// containerd, kubelet, kube-proxy (stopped in reverse).
    components: Vec<Component>,
    /// Its own directory (the run's `node/` or `nodes/<name>/`).
    node_dir: PathBuf,
    containerd_socket: PathBuf,
    ctr: PathBuf,
    /// Its kubelet's cgroup root.
    cgroup_root: String,
    /// Its private paths, and the directory on this machine holding them.
    private_paths: Vec<PathBuf>,
    private_root: PathBuf,
    stopped: bool,
}

/// Credentials and addresses the node's components use.
pub(crate) struct Access<'a> {
    pub url: &'a str,
    pub ca: &'a Path,
    pub kubelet_token: &'a str,
    pub proxy_token: &'a str,
}

impl Node {
    /// Starts containerd, loads `options.images` and the pause image, then
    /// kube-proxy and kubelet; returns once containerd answers (the caller
    /// waits for the Node object to be Ready).
    pub fn start(
        bin: &Path,
        dir: &Path,
        index: usize,
        network: Network,
        access: Access<'_>,
        options: &NodeOptions,
    ) -> Result<Node, Error> {
        let name = node_name(index);
        // The first node keeps the paths of a one-node cluster.
        let (node_dir, log_prefix) = match index {
            0 => (dir.join("node"), String::new()),
            _ => (dir.join("nodes").join(&name), format!("{name}-")),
        };
        let log = |component: &str| {
            dir.join("logs")
                .join(format!("{log_prefix}{component}.log"))
        };
        std::fs::create_dir_all(&node_dir).map_err(io(format!("create {}", node_dir.display())))?;
        let private_root = node_dir.join("root");
        if !options.private_paths.is_empty() {
            network.bind_private(&private_root, &options.private_paths)?;
        }
        let runc = which("runc").ok_or_else(|| Error::Client {
            what: "starting the node".into(),
            message: "no `runc` on PATH: install Debian's runc (apt-get install runc)".into(),
        })?;
        let cni_bin = Path::new("/usr/lib/cni");
        if !cni_bin.join("bridge").exists() {
            return Err(Error::Client {
                what: "starting the node".into(),
                message:
                    "no CNI plugins in /usr/lib/cni: install Debian's containernetworking-plugins"
                        .into(),
            });
        }
        let s = |p: &Path| p.display().to_string();

        // The pod network: one bridge in the node's namespace.
        let cni = node_dir.join("cni");
        std::fs::create_dir_all(&cni).map_err(io(format!("create {}", cni.display())))?;
        write(
            &cni.join("10-wasmprov.conflist"),
            &serde_json::json!({
                "cniVersion": "1.0.0",
                "name": name,
                "plugins": [{
                    "type": "bridge",
                    "bridge": "cni0",
                    "isGateway": true,
                    "ipMasq": true,
                    "hairpinMode": true,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": network.pod_cidr}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": s(&node_dir.join("cni-ipam")),
                    },
                }, {"type": "portmap", "capabilities": {"portMappings": true}}],
            })
            .to_string(),
        )?;

        let containerd_socket = node_dir.join("containerd.sock");
        let containerd_config = node_dir.join("containerd.toml");
        write(
            &containerd_config,
            &format!(
                r#"version = 3
root = "{root}"
state = "{state}"
[grpc]
  address = "{socket}"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"
  # Per-registry settings (hosts.toml), read at each pull: see
  # Node::trust_plain_http_registry.
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "{registry_hosts}"
[plugins.'io.containerd.cri.v1.runtime']
  netns_mounts_under_state_dir = true
  # Lowering a process's oom_score_adj needs CAP_SYS_RESOURCE, which a
  # sandboxed machine (this one) may not grant even to root.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "{runc}"
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["{cni_bin}"]
    conf_dir = "{cni}"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#,
                registry_hosts = s(&node_dir.join("registry-hosts")),
                root = s(&node_dir.join("containerd")),
                state = s(&node_dir.join("containerd-state")),
                socket = s(&containerd_socket),
                runc = s(&runc),
                cni_bin = s(cni_bin),
                cni = s(&cni),
            ),
        )?;

        let mut node = Node {
            name: name.clone(),
            network,
            components: Vec::new(),
            node_dir: node_dir.clone(),
            containerd_socket: containerd_socket.clone(),
            ctr: bin.join("ctr"),
            cgroup_root: match index {
                0 => cgroup_root(dir),
                _ => format!("{}.node-{index}", cgroup_root(dir)),
            },
            private_paths: options.private_paths.clone(),
            private_root,
            stopped: false,
        };
        let (nsenter, mut args) = node.network.enter(&bin.join("containerd"));
        args.extend([format!("--config={}", s(&containerd_config))]);
        let mut containerd = Component::spawn_with_path(
            "containerd",
            &nsenter,
            &args,
            log("containerd"),
            Some(bin),
        )?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = containerd.exited() {
                return Err(Error::Exited {
                    component: "containerd",
                    status: status.to_string(),
                    log: containerd.log.clone(),
                    tail: containerd.log_excerpt(20),
                });
            }
            if containerd_socket.exists() && run(node.ctr_command().arg("version")).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    component: "containerd",
                    waited: Duration::from_secs(60),
                    what: "`ctr version` to answer".into(),
                    log: containerd.log.clone(),
                    tail: containerd.log_excerpt(20),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        node.components.push(containerd);

        // Built beside the binaries by tests/cluster/build.sh.
        node.load_image(&bin.join("pause.oci.tar"))?;
        for image in &options.images {
            node.load_image(image)?;
        }

        let tokens_dir = node_dir.join("kubeconfigs");
        std::fs::create_dir_all(&tokens_dir)
            .map_err(io(format!("create {}", tokens_dir.display())))?;
        let url = access.url;
        let proxy_kubeconfig = tokens_dir.join("kube-proxy");
        write(
            &proxy_kubeconfig,
            &crate::kubeconfig_yaml(url, access.ca, access.proxy_token),
        )?;
        let (nsenter, mut args) = node.network.enter(&bin.join("kube-proxy"));
        args.extend([
            format!("--kubeconfig={}", s(&proxy_kubeconfig)),
            format!("--hostname-override={name}"),
            "--proxy-mode=iptables".into(),
            format!("--cluster-cidr={}", node.network.pod_cidr),
            // It would set these sysctls on this machine: conntrack is not
            // per network namespace.
            "--conntrack-max-per-core=0".into(),
            "--conntrack-tcp-timeout-established=0".into(),
            "--conntrack-tcp-timeout-close-wait=0".into(),
            "--v=2".into(),
        ]);
        let proxy = Component::spawn("kube-proxy", &nsenter, &args, log("kube-proxy"))?;
        node.components.push(proxy);

        let kubelet_dir = node_dir.join("kubelet");
        let cgroup_root = node.cgroup_root.clone();
        create_cgroup_root(&cgroup_root)?;
        let kubelet_kubeconfig = tokens_dir.join("kubelet");
        write(
            &kubelet_kubeconfig,
            &crate::kubeconfig_yaml(url, access.ca, access.kubelet_token),
        )?;
        let kubelet_config = node_dir.join("kubelet.yaml");
        write(
            &kubelet_config,
            &format!(
                r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {node_ip}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {{enabled: true}}
  webhook: {{enabled: false}}
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://{socket}
# This machine has cgroup v1 and no systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
failSwapOn: false
podLogsDir: {pod_logs}
clusterDomain: cluster.local
# Images cannot be pulled again here: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# A test machine's disk may be fuller than a node's should be; evict only
# when it is all but full.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
  nodefs.inodesFree: 1%
serializeImagePulls: false
"#,
                node_ip = node.network.node_ip,
                socket = s(&containerd_socket),
                pod_logs = s(&node_dir.join("pod-logs")),
            ),
        )?;
        let (nsenter, mut args) = node.network.enter(&bin.join("kubelet"));
        args.extend([
            format!("--config={}", s(&kubelet_config)),
            format!("--kubeconfig={}", s(&kubelet_kubeconfig)),
            format!("--root-dir={}", s(&kubelet_dir)),
            format!("--cert-dir={}", s(&kubelet_dir.join("pki"))),
            format!("--hostname-override={name}"),
            format!("--node-ip={}", node.network.node_ip),
            "--v=2".into(),
        ]);
        let kubelet = Component::spawn("kubelet", &nsenter, &args, log("kubelet"))?;
        node.components.push(kubelet);
        Ok(node)
    }

    /// `program` run in this node's mount namespace, where its kubelet and
    /// containers see the filesystem (e.g. to mount a disk of a set size).
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!(
                "--mount=/proc/{}/ns/mnt",
                self.network.holder.pid()
            ))
            .arg("--")
            .arg(program);
        command
    }

    /// `ctr --address SOCKET --namespace k8s.io` (the kubelet's namespace).
    pub fn ctr_command(&self) -> Command {
        let mut command = Command::new(&self.ctr);
        command
            .arg("--address")
            .arg(&self.containerd_socket)
            .arg("--namespace")
            .arg("k8s.io");
        command
    }

    /// Imports an OCI image tarball (named by its index's annotations).
    pub fn load_image(&self, tarball: &Path) -> Result<(), Error> {
        if !tarball.exists() {
            return Err(Error::Client {
                what: format!("loading image {} into the node", tarball.display()),
                message: "no such file (deploy/image/build.sh makes images)".into(),
            });
        }
        run(self
            .ctr_command()
            .args(["images", "import", "--all-platforms"])
            .arg(tarball))
        .map(drop)
    }

    /// Lets containerd pull from registry `host` (`address:port`) over
    /// plain HTTP: the hosts.toml a node of a lab registry has.
    pub fn trust_plain_http_registry(&self, host: &str) -> Result<(), Error> {
        let dir = self.node_dir.join("registry-hosts").join(host);
        std::fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
        write(
            &dir.join("hosts.toml"),
            &format!(
                "server = \"http://{host}\"\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
            ),
        )
    }

    /// This machine's address on the node's link: what its processes reach
    /// this machine by (a registry listening on every address, say).
    pub fn machine_address(&self) -> Ipv4Addr {
        self.network.host_ip
    }

    /// Where this machine has what the node sees at `path`: below one of
    /// its private paths, the node's own directory; else `path` itself.
    pub fn view(&self, path: &Path) -> PathBuf {
        if self.private_paths.iter().any(|p| path.starts_with(p)) {
            self.private_root
                .join(path.strip_prefix("/").unwrap_or(path))
        } else {
            path.to_owned()
        }
    }

    /// Exits of node components, for the cluster's readiness waits.
    pub fn components_mut(&mut self) -> &mut [Component] {
        &mut self.components
    }

    /// Stops (SIGSTOP) containerd, the kubelet, kube-proxy and every
    /// container process: the machine hangs. [`Node::stop`] still works.
    pub fn freeze(&self) {
        let mut pids: Vec<i32> = self.components.iter().map(|c| c.pid() as i32).collect();
        let dirs: Vec<PathBuf> = hierarchies()
            .into_iter()
            .map(|h| h.join(self.cgroup_root.trim_start_matches('/')))
            .collect();
        pids.extend(cgroup_pids(&dirs));
        signal_all(&pids, libc::SIGSTOP);
    }

    /// Stops the kubelet and kube-proxy, kills every container, stops
    /// containerd, then removes what is left of its own (shims, mounts).
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let containerd = (!self.components.is_empty()).then(|| self.components.remove(0));
        while let Some(mut c) = self.components.pop() {
            c.stop(Duration::from_secs(5));
        }
        kill_cgroup(&self.cgroup_root);
        if let Some(mut c) = containerd {
            c.stop(Duration::from_secs(5));
        }
        // Its own leftovers only: the other nodes may run on.
        let dir = canonical(&self.node_dir);
        let mut needle = dir.clone().into_os_string();
        needle.push("/");
        kill_processes_naming(Path::new(&needle));
        unmount_below(&dir);
        self.network.remove();
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop();
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The run's own cgroup tree (kubelet's `cgroupRoot`): `/wasmprov-<run>`.
fn cgroup_root(dir: &Path) -> String {
    let run = dir.file_name().unwrap_or_default().to_string_lossy();
    format!("/wasmprov-{run}")
}

/// The cgroup roots of every node of the run in `dir` that exist: the
/// first node's, and the others' (`<first>.node-<index>`).
fn run_cgroup_roots(dir: &Path) -> Vec<String> {
    let first = cgroup_root(dir);
    let name = first.trim_start_matches('/').to_owned();
    let mut roots = std::collections::BTreeSet::from([first.clone()]);
    for hierarchy in hierarchies() {
        for entry in std::fs::read_dir(&hierarchy)
            .into_iter()
            .flatten()
            .flatten()
        {
            let entry = entry.file_name().to_string_lossy().into_owned();
            if entry
                .strip_prefix(&name)
                .and_then(|rest| rest.strip_prefix(".node-"))
                .is_some_and(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()))
            {
                roots.insert(format!("/{entry}"));
            }
        }
    }
    roots.into_iter().collect()
}

/// The cgroup hierarchies mounted under /sys/fs/cgroup (one on cgroup v2).
fn hierarchies() -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    if base.join("cgroup.controllers").exists() {
        return vec![base.to_owned()];
    }
    std::fs::read_dir(base)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// kubelet wants its cgroupRoot to exist in every hierarchy.
fn create_cgroup_root(root: &str) -> Result<(), Error> {
    for h in hierarchies() {
        let dir = h.join(root.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).map_err(io(format!("create cgroup {}", dir.display())))?;
        // A new cpuset starts with no CPUs or memory nodes, which no task
        // can join: inherit them.
        for knob in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(value) = std::fs::read_to_string(h.join(knob)) {
                std::fs::write(dir.join(knob), value.trim())
                    .map_err(io(format!("write {}", dir.join(knob).display())))?;
            }
        }
    }
    Ok(())
}

/// Kills every process in the cgroup tree `root` and removes the tree.
fn kill_cgroup(root: &str) {
    let dirs: Vec<PathBuf> = hierarchies()
        .into_iter()
        .map(|h| h.join(root.trim_start_matches('/')))
        .filter(|d| d.exists())
        .collect();
    if dirs.is_empty() {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = cgroup_pids(&dirs);
        if pids.is_empty() || Instant::now() > deadline {
            break;
        }
        signal_all(&pids, libc::SIGKILL);
        std::thread::sleep(Duration::from_millis(50));
    }
    // A cgroup is removable once its last task is reaped, shortly after
    // the kill.
    for _ in 0..50 {
        let mut left = false;
        for d in &dirs {
            for sub in walk_dirs(d).into_iter().rev() {
                left |= std::fs::remove_dir(&sub).is_err() && sub.exists();
            }
        }
        if !left {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The processes in the cgroups `dirs` and below.
fn cgroup_pids(dirs: &[PathBuf]) -> Vec<i32> {
    let mut pids = Vec::new();
    for d in dirs {
        for sub in walk_dirs(d) {
            if let Ok(text) = std::fs::read_to_string(sub.join("cgroup.procs")) {
                pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
        }
    }
    pids
}

fn signal_all(pids: &[i32], signal: libc::c_int) {
    for &pid in pids {
        // SAFETY: kill(2) with a pid of the run's own (a component, or one
        // read from the run's own cgroup).
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// `dir` and every directory below it, parents first.
fn walk_dirs(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_owned()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(entries) = std::fs::read_dir(&out[i]) {
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

/// Removes what a node of the run in `dir` may have left: processes that
/// name the directory (containerd's shims), the run's cgroup tree and its
/// containers, and every mount under the directory. Safe on a directory
/// that never held a node.
pub(crate) fn sweep(dir: &Path) {
    let dir = &canonical(dir);
    for root in run_cgroup_roots(dir) {
        kill_cgroup(&root);
    }
    kill_processes_naming(dir);
    unmount_below(dir);
}

/// The path as mount points and command lines spell it (no `..`, no
/// links); `dir` itself if it does not exist.
fn canonical(dir: &Path) -> PathBuf {
    dir.canonicalize().unwrap_or_else(|_| dir.to_owned())
}

/// The programs a cluster runs: the only processes [`sweep`] may kill (a
/// person's `less …/logs/kubelet.log` names the directory too).
const OURS: &[&str] = &[
    "containerd-shim-runc-v2",
    "containerd",
    "kubelet",
    "kube-proxy",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "etcd",
    "nsenter",
    "unshare",
    "pause",
];

/// SIGKILLs every process (but this one) running one of [`OURS`] whose
/// command line contains `dir`.
fn kill_processes_naming(dir: &Path) {
    let needle = dir.as_os_str().as_encoded_bytes();
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name == me || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let program = cmdline.split(|b| *b == 0).next().unwrap_or_default();
        let program = program.rsplit(|b| *b == b'/').next().unwrap_or_default();
        let ours = OURS.iter().any(|o| o.as_bytes() == program);
        if ours && cmdline.windows(needle.len()).any(|w| w == needle) {
            if let Ok(pid) = name.parse::<i32>() {
                // SAFETY: kill(2) on a process that names our run directory.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// Unmounts (lazily) every mount at or below `dir`, deepest first.
fn unmount_below(dir: &Path) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let dir = dir.display().to_string();
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape_mount_point)
        .filter(|p| p == &dir || p.starts_with(&format!("{dir}/")))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    points.dedup();
    for p in points {
        if let Ok(c) = std::ffi::CString::new(p) {
            // SAFETY: a NUL-terminated path; MNT_DETACH never blocks.
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_mount_point(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let v = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether anything is still mounted at or below `dir` (a removal must
/// not start while something is).
pub(crate) fn has_mounts_below(dir: &Path) -> bool {
    let dir = canonical(dir).display().to_string();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape_mount_point)
        .any(|p| p == dir || p.starts_with(&format!("{dir}/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(unescape_mount_point(r"/a\040b\134c"), r"/a b\c");
        assert_eq!(unescape_mount_point("/plain"), "/plain");
        assert_eq!(unescape_mount_point(r"/short\04"), r"/short\04");
    }
}
