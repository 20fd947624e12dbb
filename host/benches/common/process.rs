//! The processes the benchmarks start, and what they read about them.

#![allow(dead_code)] // each benchmark uses a subset

use std::io::{Read, Write};
use std::time::Duration;

/// A field of `/proc/PID/status` given in kB (`VmRSS`, `VmHWM`: resident
/// now, and its peak), in MiB; 0 when the process is gone.
pub fn status_mib(pid: u32, field: &str) -> f64 {
    let prefix = format!("{field}:");
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// Whether a host's `GET /readyz` on `port` answers 200.
pub fn ready(port: u16) -> bool {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    if stream
        .write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200")
}

/// A process the benchmark started; killed when dropped.
pub struct Process(pub std::process::Child);

impl Process {
    pub fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop();
    }
}
