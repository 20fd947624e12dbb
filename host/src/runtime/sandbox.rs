//! The state of one plugin call: a WASI context built from the operator's
//! policy (deny by default), memory limits, and bounded logging.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::sockets::SocketAddrUse;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{types, v0_1, v0_2, v0_3};
use super::limits::CallLimiter;
use crate::policy::{DirMode, SandboxPolicy};
use crate::text::{escape_control, untrusted};
use v0_3::wasmprov::provisioner::logging;

/// How much a single call may log before the host starts dropping lines.
/// Keeps a misbehaving plugin from flooding the host's log pipeline.
pub const MAX_LOG_LINES_PER_CALL: u32 = 100;
pub const MAX_LOG_BYTES_PER_CALL: usize = 64 * 1024;
pub const MAX_LOG_LINE_BYTES: usize = 4096;
const MAX_LOG_FIELDS: usize = 32;
/// Bytes of stdout/stderr kept per call (the rest is dropped and counted).
pub const MAX_CAPTURED_OUTPUT: usize = 16 * 1024;
/// What one guest-to-host call may make the host allocate (strings and
/// lists copied out of the guest); past it the call traps. wasmtime's
/// default, 128 MiB, is not bounded by `memoryLimit`: a list of strings
/// sharing one buffer costs the host far more than the guest. WASI writes
/// and reads go through streams in small chunks, and a log line is cut to
/// 4 KiB anyway, so 4 MiB leaves every honest call room.
pub const MAX_HOSTCALL_BYTES: usize = 4 << 20;

/// Everything a Store holds during one call.
pub struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: CallLimiter,
    pub(crate) log: PluginLog,
    pub(crate) stdout: CapturedOutput,
    pub(crate) stderr: CapturedOutput,
    /// The policy's `guard_volumes`: links and moves are refused (`fs_guard`).
    pub(crate) guard_volumes: bool,
    /// Filesystem calls may run on the calling thread (local filesystems).
    pub(crate) blocking_filesystem_calls: bool,
}

impl CallState {
    /// Builds the sandbox of one call. Fails if a preopened directory cannot
    /// be opened.
    pub fn new(plugin: &str, subject: &str, policy: &SandboxPolicy) -> Result<Self, String> {
        let stdout = CapturedOutput::default();
        let stderr = CapturedOutput::default();
        let mut builder = WasiCtxBuilder::new();
        // No environment, no arguments, no stdin: the builder starts empty and
        // we only add what the policy grants.
        builder.stdout(stdout.clone()).stderr(stderr.clone());
        // Local filesystem calls take microseconds: running them inline is 6x
        // faster than a hop to a blocking thread per call. A preopen on a
        // network filesystem can hang, so the operator turns that off.
        builder.allow_blocking_current_thread(!policy.network_filesystem);
        for dir in &policy.preopens {
            let perms = match dir.mode {
                DirMode::ReadOnly => FsPerms::ReadOnly,
                DirMode::ReadWrite => FsPerms::ReadWrite,
            };
            builder
                .preopened_dir(&dir.host, &dir.guest, perms)
                .map_err(|e| {
                    format!(
                        "cannot open preopened directory {} (guest path {}): {e}",
                        dir.host.display(),
                        dir.guest
                    )
                })?;
        }
        if !policy.allowed_outbound.is_empty() {
            let allowed: Arc<[SocketAddr]> = policy.allowed_outbound.clone().into();
            builder
                .allow_tcp(true)
                .allow_udp(true)
                .socket_addr_check(move |addr, usage| {
                    let ok = match usage {
                        // Outbound only: a plugin never listens.
                        SocketAddrUse::TcpConnect
                        | SocketAddrUse::UdpSend
                        | SocketAddrUse::UdpReceive => allowed.contains(&addr),
                        // The implicit bind before a connect or send uses the
                        // wildcard address; an explicit bind elsewhere is refused.
                        SocketAddrUse::TcpBind | SocketAddrUse::UdpBind => {
                            addr.ip().is_unspecified() && addr.port() == 0
                        }
                        SocketAddrUse::TcpListen | SocketAddrUse::TcpAccept => false,
                    };
                    Box::pin(async move { ok })
                });
        }
        Ok(Self {
            wasi: builder.build(),
            table: ResourceTable::new(),
            limiter: CallLimiter::new(policy.memory_limit),
            log: PluginLog::new(plugin, subject),
            stdout,
            stderr,
            guard_volumes: policy.guard_volumes,
            blocking_filesystem_calls: !policy.network_filesystem,
        })
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The plugin's structured log, attributed to the plugin and the object the
/// call is about, with a per-call budget.
pub struct PluginLog {
    plugin: String,
    subject: String,
    lines_left: u32,
    bytes_left: usize,
    pub(crate) dropped: u64,
}

impl PluginLog {
    fn new(plugin: &str, subject: &str) -> Self {
        Self {
            plugin: plugin.to_owned(),
            subject: subject.to_owned(),
            lines_left: MAX_LOG_LINES_PER_CALL,
            bytes_left: MAX_LOG_BYTES_PER_CALL,
            dropped: 0,
        }
    }

    /// Reports what the budget dropped, once, at the end of a call.
    pub fn finish(&self) {
        if self.dropped > 0 {
            tracing::warn!(
                plugin = %self.plugin,
                subject = %self.subject,
                dropped = self.dropped,
                "plugin exceeded its log budget of {MAX_LOG_LINES_PER_CALL} lines or {} KiB per call; lines were dropped", MAX_LOG_BYTES_PER_CALL / 1024
            );
        }
    }
}

impl CallState {
    /// Tells the operator that a filesystem call was refused (the guest gets
    /// `not-permitted`): `what` the plugin tried, at `path` (as the guest
    /// wrote it), and `why` it may not.
    pub(crate) fn refused(&self, what: &str, path: &str, why: &str) {
        tracing::warn!(
            plugin = %self.log.plugin,
            subject = %self.log.subject,
            path = %untrusted(path, 256),
            "plugin tried to {what}; refused, and the plugin got \"operation not permitted\": {why}"
        );
    }
}

/// The `types` interface has no functions; the linker still wants its host.
impl types::Host for CallState {}

impl CallState {
    /// A plugin's log line, under its budget.
    fn log(&mut self, level: logging::Level, message: String, fields: Vec<(String, String)>) {
        let log = &mut self.log;
        if log.lines_left == 0 || log.bytes_left == 0 {
            log.dropped += 1;
            return;
        }
        log.lines_left -= 1;
        let message = untrusted(&message, MAX_LOG_LINE_BYTES.min(log.bytes_left));
        log.bytes_left = log.bytes_left.saturating_sub(message.len());
        let fields = fields
            .iter()
            .take(MAX_LOG_FIELDS)
            .map(|(k, v)| format!("{}={:?}", untrusted(k, 64), untrusted(v, 256)))
            .collect::<Vec<_>>()
            .join(" ");
        log.bytes_left = log.bytes_left.saturating_sub(fields.len());
        let (plugin, subject) = (&log.plugin, &log.subject);
        match level {
            logging::Level::Trace => {
                tracing::trace!(target: "plugin", %plugin, %subject, %fields, "{message}")
            }
            logging::Level::Debug => {
                tracing::debug!(target: "plugin", %plugin, %subject, %fields, "{message}")
            }
            logging::Level::Info => {
                tracing::info!(target: "plugin", %plugin, %subject, %fields, "{message}")
            }
            logging::Level::Warn => {
                tracing::warn!(target: "plugin", %plugin, %subject, %fields, "{message}")
            }
            logging::Level::Error => {
                tracing::error!(target: "plugin", %plugin, %subject, %fields, "{message}")
            }
        }
    }
}

impl logging::Host for CallState {
    fn log(&mut self, level: logging::Level, message: String, fields: Vec<(String, String)>) {
        CallState::log(self, level, message, fields)
    }
}

/// The `logging` import of an older contract version: the same function,
/// its own (identical) level type.
macro_rules! older_logging {
    ($version:ident) => {
        impl $version::wasmprov::provisioner::logging::Host for CallState {
            fn log(
                &mut self,
                level: $version::wasmprov::provisioner::logging::Level,
                message: String,
                fields: Vec<(String, String)>,
            ) {
                use $version::wasmprov::provisioner::logging::Level as Old;
                let level = match level {
                    Old::Trace => logging::Level::Trace,
                    Old::Debug => logging::Level::Debug,
                    Old::Info => logging::Level::Info,
                    Old::Warn => logging::Level::Warn,
                    Old::Error => logging::Level::Error,
                };
                CallState::log(self, level, message, fields)
            }
        }
    };
}
older_logging!(v0_1);
older_logging!(v0_2);

/// A guest's stdout or stderr: keeps the first bytes, drops the rest without
/// failing the guest's writes.
#[derive(Clone, Default)]
pub struct CapturedOutput(Arc<Mutex<Captured>>);

#[derive(Default)]
struct Captured {
    kept: Vec<u8>,
    dropped: u64,
}

impl CapturedOutput {
    /// The kept output as text, control characters escaped (it reaches
    /// errors, events and terminals), with a note when some was dropped.
    pub fn text(&self) -> String {
        let c = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut s = escape_control(&String::from_utf8_lossy(&c.kept)).into_owned();
        if c.dropped > 0 {
            s.push_str(&format!("…[{} more bytes dropped]", c.dropped));
        }
        s
    }

    fn write(&self, buf: &[u8]) {
        let mut c = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let room = MAX_CAPTURED_OUTPUT.saturating_sub(c.kept.len());
        let take = room.min(buf.len());
        c.kept.extend_from_slice(&buf[..take]);
        c.dropped += (buf.len() - take) as u64;
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for CapturedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.write(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_output_keeps_a_bounded_prefix() {
        let out = CapturedOutput::default();
        out.write(&vec![b'a'; MAX_CAPTURED_OUTPUT + 10]);
        let text = out.text();
        assert!(text.starts_with("aaa"));
        assert!(
            text.ends_with("[10 more bytes dropped]"),
            "{}",
            &text[text.len() - 40..]
        );
    }
}
