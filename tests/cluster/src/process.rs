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

    /// [`log_excerpt`] of the component's log: its last error line, then its last `lines` lines.
    pub fn log_excerpt(&self, lines: usize) -> String {
        log_excerpt(&self.log, lines)
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

/// What a failure report shows of a log: its last error line first (a report
/// shown cut short, as CI shows a panic, still names the cause), a warning
/// when the log's disk is nearly full (a component that cannot write its
/// data exits at once), then the last `lines` lines (of its last 64 KiB).
pub fn log_excerpt(path: &Path, lines: usize) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
        let mut bytes = Vec::new();
        let _ = file.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let all: Vec<&str> = text.lines().collect();
    let mut excerpt = String::new();
    if let Some(error) = all.iter().rev().find(|l| is_error_line(l)) {
        excerpt += &format!("(last error line: {error})\n");
    }
    if let Some(free) = free_bytes(path).filter(|&free| free < LOW_DISK) {
        excerpt += &format!(
            "(only {} MiB free on the disk of {})\n",
            free >> 20,
            path.display()
        );
    }
    excerpt + &all[all.len().saturating_sub(lines)..].join("\n")
}

/// Below this, a failure report says how little disk was left.
const LOW_DISK: u64 = 2 << 30;

/// An error in the log formats the components write: JSON (etcd,
/// containerd's `level=`), klog (`E1207 …`, `F1207 …`) and Go panics.
fn is_error_line(line: &str) -> bool {
    let klog = line.len() > 5
        && matches!(line.as_bytes()[0], b'E' | b'F')
        && line.as_bytes()[1..5].iter().all(u8::is_ascii_digit);
    klog || [
        "\"level\":\"error\"",
        "\"level\":\"fatal\"",
        "\"level\":\"panic\"",
        "level=error",
        "level=fatal",
        "panic:",
    ]
    .iter()
    .any(|marker| line.contains(marker))
}

/// Free bytes on the filesystem holding `path` (for an unprivileged user).
fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let dir = path.parent()?;
    let c_path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stats = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: statvfs fills the struct it is given, and reads a C string.
    if unsafe { libc::statvfs(c_path.as_ptr(), stats.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled the struct.
    let stats = unsafe { stats.assume_init() };
    Some(stats.f_bavail.saturating_mul(stats.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_error_line_leads_the_excerpt() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("etcd.log");
        std::fs::write(
            &log,
            "{\"level\":\"warn\",\"msg\":\"default name\"}\n\
             {\"level\":\"fatal\",\"msg\":\"listener failed\",\"error\":\"bind: address already in use\"}\n\
             {\"level\":\"warn\",\"msg\":\"closing\"}\n",
        )
        .unwrap();
        let excerpt = log_excerpt(&log, 1);
        assert!(
            excerpt
                .starts_with("(last error line: {\"level\":\"fatal\",\"msg\":\"listener failed\""),
            "{excerpt}"
        );
        assert!(
            excerpt.ends_with("{\"level\":\"warn\",\"msg\":\"closing\"}"),
            "{excerpt}"
        );
    }

    #[test]
    fn klog_errors_are_found_and_infos_are_not() {
        assert!(is_error_line(
            "E1207 21:34:47.18 1 server.go:12] failed to listen"
        ));
        assert!(is_error_line("F1207 21:34:47.18 1 server.go:12] fatal"));
        assert!(!is_error_line(
            "I1207 21:34:47.18 1 server.go:12] Error-free"
        ));
        assert!(!is_error_line("Every node is ready"));
    }
}
