//! The Wasm plugin runtime: compiles, validates and runs plugin components in
//! a sandbox. It knows the plugin contract (WIT) and nothing of Kubernetes.
//!
//! - [`Runtime`]: one wasmtime engine (component model, WASI preview 2, pooling
//!   allocator, epoch interruption), a compile cache, and admission control.
//! - [`Plugin`]: one loaded, validated component with its sandbox policy;
//!   every call runs in a fresh instance so no state leaks between claims.
//!
//! Guarantees: a plugin that traps, loops, exhausts its memory, floods its log
//! or returns garbage fails *that call* with a [`CallError`]; the host and
//! every other plugin keep working.
//!
//! Caveats: the time budget is wall-clock and enforced at epoch ticks
//! ([`EPOCH_TICK`]); a call blocked inside a host function (e.g. a slow
//! filesystem) is additionally bounded by a timer around the whole call, and
//! one that even the timer cannot end (a thread blocked inline) is reported
//! by [`Runtime::stuck_calls`].

pub mod bindings;
mod cache;
pub mod compile;
mod contract;
mod fs_guard;
mod in_flight;
mod inspect;
mod limits;
mod plugin;
mod sandbox;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

pub use cache::CacheOutcome;
pub use fs_guard::{file_kind_name, FILESYSTEM_TYPES};
pub use inspect::{binary_kind, BinaryKind, Surface};
pub use limits::MemoryLimitExceeded;
pub use plugin::{CallError, Plugin};
pub use sandbox::{MAX_LOG_BYTES_PER_CALL, MAX_LOG_LINES_PER_CALL};

use crate::policy::{DirMode, SandboxPolicy};
use cache::CompileCache;
use contract::Hooks;
use inspect::Mismatch;
use sandbox::CallState;

/// How often the epoch advances; the granularity of per-call time budgets.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Engine-wide settings, chosen by whoever runs the host.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Directory of the compile cache; `None` compiles every load.
    pub cache_dir: Option<PathBuf>,
    /// Upper bound for any plugin's `memoryLimit` (pooling slot size).
    pub max_memory_per_call: u64,
    /// Calls running at once across all plugins (pooling slots).
    pub max_concurrent_calls: u32,
    /// Bytes of each pooled memory kept resident between calls: faster fresh
    /// instances at the cost of resident memory.
    pub keep_resident: usize,
    /// After a call, restore only the pages it dirtied (Linux 6.7+
    /// `PAGEMAP_SCAN`) instead of memsetting the first `keep_resident` bytes
    /// of every memory. Either way the next instance sees pristine memory;
    /// older kernels fall back to the memset. Off only to measure the
    /// difference.
    pub reset_dirty_pages_only: bool,
    /// Compile in a child process within this budget; `None` compiles in
    /// process, bounded only by the shape check ([`compile`]).
    pub compile_budget: Option<compile::CompileBudget>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            max_memory_per_call: 1 << 30,
            max_concurrent_calls: 64,
            keep_resident: 16 << 20,
            reset_dirty_pages_only: true,
            compile_budget: None,
        }
    }
}

/// A component that cannot be used as a plugin. Nothing of it was run.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("plugin {plugin}: not a WebAssembly file (expected a component for the wasmprov:provisioner@{} world)", bindings::CONTRACT_VERSION)]
    NotWasm { plugin: String },
    #[error("plugin {plugin}: this is a core WebAssembly module, not a component; build it for the wasm32-wasip2 target, or wrap it with `wasm-tools component new`")]
    CoreModule { plugin: String },
    #[error("plugin {plugin}: not a valid component: {message}")]
    Invalid { plugin: String, message: String },
    #[error("plugin {plugin}: a component of another world: it does not export `{}@{}` (it exports: {}); build it against wit/provisioner.wit, world `provisioner`", bindings::PLUGIN_INTERFACE, bindings::CONTRACT_VERSION, list_or_none(.exports))]
    WrongWorld {
        plugin: String,
        exports: Vec<String>,
    },
    #[error("plugin {plugin}: built for {interface}@{found}, which this host does not support (it runs versions {} and compatible patch releases); rebuild the plugin against this host's wit/ or upgrade the host", bindings::SUPPORTED_VERSIONS.join(", "))]
    UnsupportedVersion {
        plugin: String,
        interface: String,
        found: String,
    },
    #[error("plugin {plugin}: its exports do not match the contract: {message}")]
    Signature { plugin: String, message: String },
    #[error("plugin {plugin}: it imports something the sandbox does not provide: {message} (plugins may import WASI preview 2 and wasmprov:provisioner/logging only; for JavaScript, build with `-d http fetch-event`)")]
    Imports { plugin: String, message: String },
    #[error("plugin {plugin}: its memory limit {limit} bytes is above the host's maximum of {max} bytes per call; lower memoryLimit in the sandbox policy or raise the host's maximum")]
    MemoryLimitTooHigh {
        plugin: String,
        limit: u64,
        max: u64,
    },
    #[error("plugin {plugin}: refused before compiling: {message}; a component made by a compiler never comes near this, so this one was likely made to exhaust the host")]
    Shape { plugin: String, message: String },
    #[error("plugin {plugin}: {message}; the host is unaffected, and raising the budget is only for a component you trust")]
    CompileBudget { plugin: String, message: String },
    #[error("plugin {plugin}: its read-write preopen {} overlaps the compile cache {}, where it could plant compiled code the host would run; preopen another directory, or move the cache (--cache-dir)", .preopen.display(), .cache.display())]
    PreopenOverCache {
        plugin: String,
        preopen: PathBuf,
        cache: PathBuf,
    },
    // The call's error is part of this message, not its source: shown
    // with its chain (`{:#}`), it would be said twice.
    #[error("plugin {plugin}: failed its first call (capabilities): {error}")]
    Probe {
        plugin: String,
        error: Box<CallError>,
    },
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "nothing".to_owned()
    } else {
        items.join(", ")
    }
}

/// The engine could not be set up (e.g. the pool could not be reserved).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot configure the Wasm engine: {0}")]
    Engine(String),
    #[error("cannot use compile cache directory {path}: {error}")]
    Cache {
        path: PathBuf,
        // Part of the message, not a `source` (it would be said twice).
        error: std::io::Error,
    },
}

/// A component's identity: `sha256:<hex>` of its bytes. The compile cache is
/// keyed by it and volumes record it (`wasmprov.io/plugin-digest`).
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A validated component, compiled (or loaded from cache) but not yet bound
/// to a name and policy. Loading is the expensive step; binding is free.
#[derive(Clone)]
pub struct Compiled {
    pub(crate) hooks: Hooks,
    /// `sha256:<hex>` of the component bytes.
    pub digest: String,
    /// Bytes of the component; 0 when it was found in the cache by digest alone.
    pub size: usize,
    pub contract_version: String,
    pub surface: Surface,
    pub cache: CacheOutcome,
    pub compile_time: Duration,
}

/// The engine of a runtime with `config`. The compiler child builds the same
/// one (so what it compiles loads here) but with `pooling` off: the pool's
/// writable reservations (stacks, tables) would count against its memory
/// limit, and compiled code does not depend on how instances are allocated.
fn engine(config: &RuntimeConfig, pooling: bool) -> wasmtime::Result<Engine> {
    let slots = config.max_concurrent_calls;
    let mut pool = PoolingAllocationConfig::default();
    // A component holds several core instances and memories (adapters,
    // language runtimes): size the pool per component, not per module.
    pool.total_component_instances(slots)
        .total_core_instances(slots * 16)
        .total_memories(slots * 4)
        .total_tables(slots * 16)
        .total_stacks(slots)
        .max_memory_size(usize::try_from(config.max_memory_per_call).unwrap_or(usize::MAX))
        .max_component_instance_size(4 << 20)
        .max_core_instance_size(4 << 20)
        .linear_memory_keep_resident(config.keep_resident)
        .table_keep_resident(64 << 10)
        // A fresh instance of the hostpath plugin costs 10 µs with this
        // instead of 27 µs: its call dirties a few pages of a >1 MiB
        // memory, and memsetting all of it was most of the cost.
        .pagemap_scan(if config.reset_dirty_pages_only {
            Enabled::Auto
        } else {
            Enabled::No
        });
    let mut wasm = Config::new();
    wasm.wasm_component_model(true).epoch_interruption(true);
    if pooling {
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    Engine::new(&wasm)
}

/// `wasmprov __compile-component`: the compiler child ([`compile`]). Its
/// engine has no instance pool, the only part of a runtime's settings that
/// differs between hosts, so it needs none of them.
pub fn compile_child(memory_limit: u64) -> std::process::ExitCode {
    match engine(&RuntimeConfig::default(), false) {
        Ok(engine) => compile::child_main(memory_limit, engine),
        Err(e) => {
            eprintln!("cannot build the engine: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The Wasm engine shared by every plugin.
pub struct Runtime {
    engine: Engine,
    linker: Linker<CallState>,
    cache: Option<CompileCache>,
    config: RuntimeConfig,
    /// Admission control in front of the instance pool: past the pool size,
    /// instantiation would fail instead of waiting.
    slots: Arc<Semaphore>,
    in_flight: in_flight::CallsInFlight,
    ticker: Option<EpochTicker>,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        let engine_err = |e: wasmtime::Error| RuntimeError::Engine(format!("{e:#}"));
        let slots = config.max_concurrent_calls;
        let engine = engine(&config, true).map_err(engine_err)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(engine_err)?;
        // What wasmtime-wasi has no permission for: links, moves and special
        // files (`fs_guard`).
        fs_guard::add_to_linker(&mut linker).map_err(engine_err)?;
        // Every contract version's imports: a component built against any
        // of them links.
        bindings::v0_3::FullProvisioner::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |s| s,
        )
        .map_err(engine_err)?;
        bindings::v0_2::ResizableProvisioner::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |s| s,
        )
        .map_err(engine_err)?;
        bindings::v0_1::Provisioner::add_to_linker::<_, wasmtime::component::HasSelf<_>>(
            &mut linker,
            |s| s,
        )
        .map_err(engine_err)?;

        let cache = match &config.cache_dir {
            Some(dir) => {
                Some(
                    CompileCache::new(dir, &engine).map_err(|error| RuntimeError::Cache {
                        path: dir.clone(),
                        error,
                    })?,
                )
            }
            None => None,
        };
        let in_flight = in_flight::CallsInFlight::default();
        let ticker = EpochTicker::start(engine.clone(), in_flight.clone())
            .map_err(|e| RuntimeError::Engine(format!("cannot start the epoch thread: {e}")))?;
        Ok(Self {
            ticker: Some(ticker),
            engine,
            linker,
            cache,
            slots: Arc::new(Semaphore::new(slots as usize)),
            in_flight,
            config,
        })
    }

    /// Compiles (or loads from the cache) and validates a component.
    /// `plugin` names it in errors.
    pub fn compile(&self, plugin: &str, bytes: &[u8]) -> Result<Compiled, LoadError> {
        self.compile_digested(plugin, bytes, digest(bytes))
    }

    /// [`Self::compile`] for a caller that already has the bytes' [`digest`]
    /// (hashing a 12 MB component takes ~10 ms).
    pub fn compile_digested(
        &self,
        plugin: &str,
        bytes: &[u8],
        digest: String,
    ) -> Result<Compiled, LoadError> {
        let name = || plugin.to_owned();
        match inspect::binary_kind(bytes) {
            BinaryKind::NotWasm => return Err(LoadError::NotWasm { plugin: name() }),
            BinaryKind::CoreModule => return Err(LoadError::CoreModule { plugin: name() }),
            BinaryKind::Component => {}
        }
        let key = digest.strip_prefix("sha256:").unwrap_or(&digest).to_owned();
        let key = key.as_str();
        let started = Instant::now();
        let (component, outcome) = match self.cache.as_ref().and_then(|c| c.load(&self.engine, key))
        {
            Some(component) => (component, CacheOutcome::Hit),
            None => {
                let component = self.compile_within_budget(plugin, bytes)?;
                let outcome = match &self.cache {
                    Some(cache) => match cache.store(key, &component) {
                        Ok(()) => CacheOutcome::Compiled,
                        Err(e) => {
                            tracing::warn!(plugin, error = %e, "cannot write the compile cache; the next start compiles again");
                            CacheOutcome::CompiledUncached
                        }
                    },
                    None => CacheOutcome::CompiledUncached,
                };
                (component, outcome)
            }
        };
        self.validate(
            plugin,
            component,
            digest,
            bytes.len(),
            outcome,
            started.elapsed(),
        )
    }

    /// Compiles `bytes`, refusing a dangerous shape first, in the compiler
    /// child when the runtime has a budget ([`compile`]).
    fn compile_within_budget(&self, plugin: &str, bytes: &[u8]) -> Result<Component, LoadError> {
        let invalid = |message: String| LoadError::Invalid {
            plugin: plugin.to_owned(),
            message,
        };
        compile::check_shape(bytes).map_err(|message| LoadError::Shape {
            plugin: plugin.to_owned(),
            message,
        })?;
        let Some(budget) = &self.config.compile_budget else {
            return Component::new(&self.engine, bytes).map_err(|e| invalid(format!("{e:#}")));
        };
        let artifact = compile::compile_in_child(budget, bytes).map_err(|e| match e {
            compile::ChildError::Invalid(message) => invalid(message),
            compile::ChildError::Budget(message) => LoadError::CompileBudget {
                plugin: plugin.to_owned(),
                message,
            },
        })?;
        // SAFETY: the artifact was just written by this very program (the
        // compiler child) from the bytes above; `deserialize` checks that it
        // was made for a compatible engine.
        unsafe { Component::deserialize(&self.engine, &artifact) }
            .map_err(|e| invalid(format!("the compiler's output does not load: {e:#}")))
    }

    /// A component compiled earlier, found in the compile cache by its digest
    /// (`sha256:<hex>`) alone: how the host still deletes volumes made by a
    /// plugin whose file has since been removed. `None` if it is not cached.
    pub fn compile_cached(
        &self,
        plugin: &str,
        digest: &str,
    ) -> Option<Result<Compiled, LoadError>> {
        let key = digest.strip_prefix("sha256:")?;
        let started = Instant::now();
        let component = self.cache.as_ref()?.load(&self.engine, key)?;
        Some(self.validate(
            plugin,
            component,
            digest.to_owned(),
            0,
            CacheOutcome::Hit,
            started.elapsed(),
        ))
    }

    /// Checks a compiled component against the contract and the sandbox's imports.
    fn validate(
        &self,
        plugin: &str,
        component: Component,
        digest: String,
        size: usize,
        cache: CacheOutcome,
        compile_time: Duration,
    ) -> Result<Compiled, LoadError> {
        let name = || plugin.to_owned();
        let surface = inspect::surface(&self.engine, &component);
        let contract_version = inspect::check_contract(&surface).map_err(|m| match m {
            Mismatch::WrongWorld { exports } => LoadError::WrongWorld {
                plugin: name(),
                exports,
            },
            Mismatch::UnsupportedVersion { interface, found } => LoadError::UnsupportedVersion {
                plugin: name(),
                interface,
                found,
            },
        })?;
        let instance_pre =
            self.linker
                .instantiate_pre(&component)
                .map_err(|e| LoadError::Imports {
                    plugin: name(),
                    message: format!("{e:#}"),
                })?;
        let hooks = Hooks::new(
            instance_pre,
            &contract_version,
            inspect::optional_exports(&surface),
        )
        .map_err(|e| LoadError::Signature {
            plugin: name(),
            message: format!("{e:#}"),
        })?;
        Ok(Compiled {
            hooks,
            digest,
            size,
            contract_version,
            surface,
            cache,
            compile_time,
        })
    }

    /// Binds a compiled component to a plugin name and sandbox policy, and
    /// probes it with a first call (`capabilities`) inside that sandbox.
    pub async fn instantiate(
        &self,
        plugin: &str,
        compiled: Compiled,
        policy: SandboxPolicy,
    ) -> Result<Plugin, LoadError> {
        if policy.memory_limit > self.config.max_memory_per_call {
            return Err(LoadError::MemoryLimitTooHigh {
                plugin: plugin.to_owned(),
                limit: policy.memory_limit,
                max: self.config.max_memory_per_call,
            });
        }
        if let Some(cache) = &self.config.cache_dir {
            let cache = std::fs::canonicalize(cache).unwrap_or_else(|_| cache.clone());
            for dir in policy
                .preopens
                .iter()
                .filter(|p| p.mode == DirMode::ReadWrite)
            {
                let host = std::fs::canonicalize(&dir.host).unwrap_or_else(|_| dir.host.clone());
                if host.starts_with(&cache) || cache.starts_with(&host) {
                    return Err(LoadError::PreopenOverCache {
                        plugin: plugin.to_owned(),
                        preopen: dir.host.clone(),
                        cache,
                    });
                }
            }
        }
        Plugin::probe(
            plugin,
            compiled,
            policy,
            self.slots.clone(),
            self.in_flight.clone(),
        )
        .await
        .map_err(|error| LoadError::Probe {
            plugin: plugin.to_owned(),
            error: Box::new(error),
        })
    }

    /// Where compiled plugins are kept across restarts, if anywhere
    /// (`--cache-dir`); other caches of plugins may live beside them.
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.config.cache_dir.as_deref()
    }

    /// Calls running well past their budget, which no timer could end (a
    /// thread blocked in a filesystem call): the host is then not ready.
    pub fn stuck_calls(&self) -> Vec<String> {
        self.in_flight.stuck()
    }

    /// [`Runtime::compile`] then [`Runtime::instantiate`].
    pub async fn load(
        &self,
        plugin: &str,
        bytes: &[u8],
        policy: SandboxPolicy,
    ) -> Result<Plugin, LoadError> {
        let compiled = self.compile(plugin, bytes)?;
        self.instantiate(plugin, compiled, policy).await
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(t) = self.ticker.take() {
            t.stop();
        }
    }
}

/// Advances the engine's epoch every [`EPOCH_TICK`] while a call runs, so
/// per-call deadlines fire and busy plugins yield. A thread (not a task)
/// keeps ticking even if every runtime worker is busy; it rests while no
/// call runs (an idle host wakes nobody 100 times a second) and a call's
/// start wakes it.
struct EpochTicker {
    stop: Arc<AtomicBool>,
    /// Epochs advanced so far (what the tests look at).
    #[cfg_attr(not(test), allow(dead_code))]
    ticks: Arc<std::sync::atomic::AtomicU64>,
    thread: JoinHandle<()>,
}

impl EpochTicker {
    fn start(engine: Engine, calls: in_flight::CallsInFlight) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let ticks = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (flag, count, running) = (stop.clone(), ticks.clone(), calls.clone());
        let thread = std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    if running.idle() {
                        // A call starting now unparks us, before or after
                        // this park: its wake-up is never lost.
                        std::thread::park();
                        continue;
                    }
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                    count.fetch_add(1, Ordering::Relaxed);
                }
            })?;
        calls.wake_on_start(thread.thread().clone());
        Ok(Self {
            stop,
            ticks,
            thread,
        })
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_their_cause_once_with_its_chain() {
        let cache = RuntimeError::Cache {
            path: "/cache".into(),
            error: std::io::Error::other("disk on fire"),
        };
        let shown = format!("{:#}", anyhow::Error::from(cache));
        assert_eq!(shown.matches("disk on fire").count(), 1, "{shown}");
    }

    #[test]
    fn the_epoch_ticks_only_while_a_call_runs() {
        let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
        let ticks = || {
            runtime
                .ticker
                .as_ref()
                .unwrap()
                .ticks
                .load(Ordering::Relaxed)
        };
        std::thread::sleep(EPOCH_TICK * 10);
        assert_eq!(ticks(), 0, "an idle host does not tick");
        let call =
            runtime
                .in_flight
                .start(&Arc::from("hostpath"), "pvc-1", Duration::from_secs(10));
        std::thread::sleep(EPOCH_TICK * 10);
        let during = ticks();
        assert!(during >= 3, "ticks while a call runs: {during}");
        drop(call);
        std::thread::sleep(EPOCH_TICK * 3);
        let after = ticks();
        std::thread::sleep(EPOCH_TICK * 10);
        assert!(ticks() <= after + 1, "rests again once the call ended");
    }

    /// Writes where a call could leave state behind (a data segment, an
    /// untouched page of the initial memory, hundreds of pages it grows, every
    /// other page so the dirty set is fragmented) after checking each still
    /// holds its original value. Returns 0, or which check saw a previous
    /// instance's write.
    const LEAKY: &str = r#"
        (module
          (memory 2)
          (data (i32.const 16) "\2a\00\00\00")
          (func (export "run") (result i32)
            (local $addr i32)
            (if (i32.ne (i32.load (i32.const 16)) (i32.const 42)) (then (return (i32.const 1))))
            (i32.store (i32.const 16) (i32.const 7))
            (if (i32.ne (i32.load (i32.const 65636)) (i32.const 0)) (then (return (i32.const 2))))
            (i32.store (i32.const 65636) (i32.const 9))
            (if (i32.eq (memory.grow (i32.const 100)) (i32.const -1)) (then (return (i32.const 3))))
            (local.set $addr (i32.const 131072))
            (loop $pages
              (if (i32.ne (i32.load (local.get $addr)) (i32.const 0)) (then (return (i32.const 4))))
              (i32.store (local.get $addr) (i32.const 5))
              (local.set $addr (i32.add (local.get $addr) (i32.const 8192)))
              (br_if $pages (i32.lt_u (local.get $addr) (i32.const 6684672))))
            (i32.const 0)))
    "#;

    #[tokio::test]
    async fn a_fresh_instance_never_sees_what_the_previous_one_wrote() {
        // 16 MiB resident resets every dirty page in place; 64 KiB resident
        // also gives most of them back to the kernel; and the memset reset.
        for (keep_resident, reset_dirty_pages_only) in
            [(16 << 20, true), (64 << 10, true), (16 << 20, false)]
        {
            let runtime = Runtime::new(RuntimeConfig {
                max_concurrent_calls: 2,
                keep_resident,
                reset_dirty_pages_only,
                ..RuntimeConfig::default()
            })
            .unwrap();
            let wasm = wat::parse_str(LEAKY).unwrap();
            let module = wasmtime::Module::new(&runtime.engine, wasm).unwrap();
            for round in 0..20 {
                let mut store = wasmtime::Store::new(&runtime.engine, ());
                store.set_epoch_deadline(1_000);
                let instance = wasmtime::Instance::new_async(&mut store, &module, &[])
                    .await
                    .unwrap();
                let run = instance
                    .get_typed_func::<(), i32>(&mut store, "run")
                    .unwrap();
                let found = run.call_async(&mut store, ()).await.unwrap();
                assert_eq!(
                    found, 0,
                    "keep_resident {keep_resident}, dirty pages only {reset_dirty_pages_only}, instance {round}: check {found} saw a previous instance's write"
                );
            }
        }
    }
}
