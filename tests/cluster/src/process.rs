//! Control-plane processes that cannot outlive the test that started them.
//!
//! Each component runs with `PR_SET_PDEATHSIG = SIGKILL`, so the kernel kills
//! it when its parent goes away, even when a test panics, aborts or is killed
//! and no destructor runs. The signal fires when the *thread* that forked
//! exits, not the process, so every child is forked from one spawner thread
//! that lives as long as the process (test threads come and go).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

type SpawnJob = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnJob>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("test-cluster-spawner".into())
            .spawn(move || {
                // The sender lives in a static, so this loop (and the thread
                // the children's death signal is tied to) lasts until exit.
                for (mut command, reply) in rx {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("start the control-plane spawner thread");
        Mutex::new(tx)
    })
}

/// A running component: its process and its log file.
pub struct Component {
    pub name: &'static str,
    pub log: PathBuf,
    child: Child,
}

impl Component {
    /// Starts `binary args…` with stdout and stderr in `log`.
    pub fn spawn(
        name: &'static str,
        binary: &Path,
        args: &[String],
        log: PathBuf,
    ) -> Result<Component, crate::Error> {
        Self::spawn_with_path(name, binary, args, log, None)
    }

    /// [`Component::spawn`], with `path_first` ahead of `$PATH` (for a
    /// component that finds its helpers there, as containerd its shims).
    pub fn spawn_with_path(
        name: &'static str,
        binary: &Path,
        args: &[String],
        log: PathBuf,
        path_first: Option<&Path>,
    ) -> Result<Component, crate::Error> {
        let out = File::create(&log).map_err(|e| crate::Error::Io {
            what: format!("create {}", log.display()),
            source: e,
        })?;
        let err = out.try_clone().map_err(|e| crate::Error::Io {
            what: format!("open {}", log.display()),
            source: e,
        })?;
        let mut command = Command::new(binary);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if let Some(dir) = path_first {
            let path = std::env::var_os("PATH").unwrap_or_default();
            let dirs = std::iter::once(dir.to_owned()).chain(std::env::split_paths(&path));
            if let Ok(joined) = std::env::join_paths(dirs) {
                command.env("PATH", joined);
            }
        }
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (tx, rx) = mpsc::channel();
        spawner()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send((command, tx))
            .expect("the spawner thread never exits");
        let child = rx
            .recv()
            .expect("the spawner thread answers every job")
            .map_err(|e| crate::Error::Spawn {
                component: name,
                binary: binary.to_owned(),
                source: e,
            })?;
        Ok(Component { name, log, child })
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last `lines` lines of the component's log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// SIGTERM, then SIGKILL if it has not exited within `grace`.
    pub fn stop(&mut self, grace: Duration) {
        if self.exited().is_some() {
            return;
        }
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
            // A stopped (frozen) process handles the SIGTERM once it runs.
            libc::kill(self.child.id() as libc::pid_t, libc::SIGCONT);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
    }
}

/// The last `lines` lines of a log file (at most its last 64 KiB).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
