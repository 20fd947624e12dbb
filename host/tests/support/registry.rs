//! A real OCI registry for tests: distribution's `registry` (v3, built
//! from the Go module proxy with the test cluster), one per test, in a
//! directory of its own, stopped when dropped.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A registry (distribution's, built with the test cluster), stopped when
/// dropped.
pub struct Registry {
    child: Child,
    storage: tempfile::TempDir,
    /// `127.0.0.1:PORT`: where this machine reaches it.
    pub addr: String,
    pub port: u16,
}

impl Registry {
    /// On loopback.
    pub fn start() -> Self {
        Self::start_with(|_| String::new())
    }

    /// Listening on every address of this machine, so that nodes reach it
    /// too (through their links: `Cluster::machine_address`).
    pub fn on_every_address() -> Self {
        Self::listening("0.0.0.0", |_| String::new())
    }

    /// A registry that wants user `user` with password `password`.
    pub fn with_login(user: &str, password: &str) -> Self {
        let hash = bcrypt::hash(password, 4).unwrap();
        Self::start_with(|dir| {
            let file = dir.join("htpasswd");
            std::fs::write(&file, format!("{user}:{hash}\n")).unwrap();
            format!(
                "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                file.display()
            )
        })
    }

    /// A registry serving HTTPS with a certificate from a private
    /// authority, whose certificate (PEM) is in the returned file.
    pub fn with_private_ca() -> (Self, tempfile::TempDir) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let ca_dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        std::fs::write(ca_dir.path().join("ca.crt"), ca_cert.pem()).unwrap();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        let registry = Self::start_with(|dir| {
            std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
            std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
            format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                dir.join("tls.crt").display(),
                dir.join("tls.key").display()
            )
        });
        (registry, ca_dir)
    }

    /// A registry whose configuration ends with what `extra` returns; it
    /// may write files in the registry's directory, which it is given.
    pub fn start_with(extra: impl FnOnce(&Path) -> String) -> Self {
        Self::listening("127.0.0.1", extra)
    }

    fn listening(address: &str, extra: impl FnOnce(&Path) -> String) -> Self {
        let bin = test_cluster::binaries().expect("the registry (tests/cluster/build.sh)");
        let storage = tempfile::tempdir().unwrap();
        let extra_config = extra(storage.path());
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let listen = format!("{address}:{port}");
        let config = storage.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp:\n  addr: {listen}\n{extra_config}",
                storage.path().join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new(bin.join("registry"))
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(storage.path().join("registry.log")).unwrap())
            .spawn()
            .expect("start the registry");
        let started = Instant::now();
        while TcpStream::connect(&addr).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the registry did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry {
            child,
            storage,
            addr,
            port,
        }
    }

    /// `REGISTRY/repository_and_tag`, as this machine reaches it.
    pub fn reference(&self, repository_and_tag: &str) -> String {
        format!("{}/{repository_and_tag}", self.addr)
    }

    /// Where the registry keeps a blob's bytes.
    pub fn blob(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.storage
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
