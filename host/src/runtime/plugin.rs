//! One loaded plugin and its calls. Each call gets a fresh instance in a fresh
//! Store built from the plugin's sandbox policy.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};
use wasmtime::{Store, Trap, UpdateDeadline};

use super::bindings::types::{
    DeleteError, DeleteRequest, PluginCapabilities as Capabilities, ProvisionError,
    ProvisionRequest, ResizeError, ResizeRequest, ResizedVolume, Volume,
};
use super::bindings::{CapacityReport, CapacityRequest};
use super::in_flight::{CallsInFlight, InFlight};
use super::limits::MemoryLimitExceeded;
use super::sandbox::CallState;
use super::Compiled;
use crate::policy::SandboxPolicy;
use crate::text::{escape_control, tail, truncate};

/// Extra time a call gets past its budget before the host abandons it, for a
/// guest blocked in a host function where epochs cannot interrupt it.
const HOST_CALL_GRACE: Duration = Duration::from_secs(1);
/// How much of a crashed plugin's stderr goes into the error.
const STDERR_IN_ERROR: usize = 2048;

/// A call that ended without an answer from the plugin. The host stays
/// healthy; only this call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("plugin {plugin} ran out of time on {subject}: it exceeded its budget of {budget:?} and was stopped; if the backend is legitimately slow, raise `timeout` for this plugin in the sandbox policy")]
    Timeout {
        plugin: String,
        subject: String,
        budget: Duration,
    },
    // The cause is part of the message, not a `source`: shown with its
    // chain (`{:#}`), it would be said twice.
    #[error("plugin {plugin} ran out of memory on {subject}: {exceeded}; raise `memoryLimit` for this plugin in the sandbox policy if it legitimately needs more")]
    MemoryLimit {
        plugin: String,
        subject: String,
        exceeded: MemoryLimitExceeded,
    },
    #[error("plugin {plugin} crashed on {subject}: {message}{}", stderr_suffix(.stderr))]
    Trap {
        plugin: String,
        subject: String,
        message: String,
        /// What the plugin wrote to stderr before it crashed (e.g. a panic message).
        stderr: String,
    },
    #[error("plugin {plugin}: cannot set up the sandbox for {subject}: {message}")]
    Sandbox {
        plugin: String,
        subject: String,
        message: String,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        String::new()
    } else {
        format!("; its stderr said: {}", tail(s, STDERR_IN_ERROR))
    }
}

/// A validated plugin, ready to serve calls.
pub struct Plugin {
    name: Arc<str>,
    compiled: Compiled,
    policy: SandboxPolicy,
    capabilities: Capabilities,
    /// This plugin's `maxConcurrentCalls`.
    calls: Arc<Semaphore>,
    /// The runtime's instance pool slots.
    slots: Arc<Semaphore>,
    /// The runtime's record of running calls.
    in_flight: CallsInFlight,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("digest", &self.compiled.digest)
            .finish_non_exhaustive()
    }
}

impl Plugin {
    /// Binds `compiled` to a name and policy and makes a first call.
    pub(super) async fn probe(
        name: &str,
        compiled: Compiled,
        policy: SandboxPolicy,
        slots: Arc<Semaphore>,
        in_flight: CallsInFlight,
    ) -> Result<Self, CallError> {
        let mut plugin = Self {
            name: name.into(),
            calls: Arc::new(Semaphore::new(policy.max_concurrent_calls)),
            compiled,
            policy,
            capabilities: Capabilities {
                block_volumes: false,
            },
            slots,
            in_flight,
        };
        plugin.capabilities = plugin.call_capabilities().await?;
        Ok(plugin)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `sha256:<hex>` of the component.
    pub fn digest(&self) -> &str {
        &self.compiled.digest
    }

    pub fn compiled(&self) -> &Compiled {
        &self.compiled
    }

    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    /// What the plugin said it supports when it was loaded.
    pub fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    /// Calls the plugin's `capabilities` in a fresh instance (the answer at load
    /// time is cached in [`Plugin::capabilities`]).
    pub async fn call_capabilities(&self) -> Result<Capabilities, CallError> {
        let subject = "capabilities";
        let mut call = self.begin(subject).await?;
        let hooks = &self.compiled.hooks;
        let outcome = call
            .bounded(async |store| hooks.capabilities(store).await)
            .await;
        call.finish(outcome)
    }

    /// Runs the plugin's `provision` for one claim in a fresh instance.
    pub async fn provision(
        &self,
        request: &ProvisionRequest,
    ) -> Result<Result<Volume, ProvisionError>, CallError> {
        let mut call = self.begin(&request.pv_name).await?;
        let hooks = &self.compiled.hooks;
        let outcome = call
            .bounded(async |store| hooks.provision(store, request).await)
            .await;
        call.finish(outcome)
    }

    /// Runs the plugin's `delete` for one volume in a fresh instance.
    pub async fn delete(
        &self,
        request: &DeleteRequest,
    ) -> Result<Result<(), DeleteError>, CallError> {
        let mut call = self.begin(&request.pv_name).await?;
        let hooks = &self.compiled.hooks;
        let outcome = call
            .bounded(async |store| hooks.delete(store, request).await)
            .await;
        call.finish(outcome)
    }

    /// Whether the plugin grows volumes: it exports `resizer` (contract 0.2).
    pub fn can_resize(&self) -> bool {
        self.compiled.hooks.has_resizer()
    }

    /// Runs the plugin's `resize` for one volume in a fresh instance. A
    /// plugin without `resizer` ([`Plugin::can_resize`]) fails the call.
    pub async fn resize(
        &self,
        request: &ResizeRequest,
    ) -> Result<Result<ResizedVolume, ResizeError>, CallError> {
        let mut call = self.begin(&request.volume.pv_name).await?;
        let hooks = &self.compiled.hooks;
        let outcome = call
            .bounded(async |store| hooks.resize(store, request).await)
            .await;
        call.finish(outcome)
    }

    /// Whether the plugin reports a node's room for its volumes: it exports
    /// `capacity` (contract 0.3).
    pub fn reports_capacity(&self) -> bool {
        self.compiled.hooks.has_capacity()
    }

    /// Runs the plugin's `capacity` for one class and node in a fresh
    /// instance. A plugin without it ([`Plugin::reports_capacity`]) fails
    /// the call.
    pub async fn capacity(
        &self,
        request: &CapacityRequest,
    ) -> Result<Result<Option<CapacityReport>, String>, CallError> {
        let subject = format!("capacity of {}", request.storage_class.name);
        let mut call = self.begin(&subject).await?;
        let hooks = &self.compiled.hooks;
        let outcome = call
            .bounded(async |store| hooks.capacity(store, request).await)
            .await;
        call.finish(outcome)
    }

    /// Waits for a free call slot, then builds the sandbox of one call.
    async fn begin(&self, subject: &str) -> Result<Call<'_>, CallError> {
        let sandbox_error = |message: String| CallError::Sandbox {
            plugin: self.name.to_string(),
            subject: subject.to_owned(),
            message,
        };
        // Semaphores are never closed, so acquire only fails if they were.
        let plugin_permit = self
            .calls
            .acquire()
            .await
            .map_err(|e| sandbox_error(e.to_string()))?;
        let slot_permit = self
            .slots
            .acquire()
            .await
            .map_err(|e| sandbox_error(e.to_string()))?;
        let state = CallState::new(&self.name, subject, &self.policy).map_err(sandbox_error)?;
        let mut store = Store::new(self.compiled.hooks.engine(), state);
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(super::sandbox::MAX_HOSTCALL_BYTES);
        let deadline = Instant::now() + self.policy.timeout;
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            Ok(if Instant::now() >= deadline {
                UpdateDeadline::Interrupt
            } else {
                // Yield at every tick so a busy plugin never monopolises an
                // executor thread.
                UpdateDeadline::Yield(1)
            })
        });
        Ok(Call {
            plugin: self,
            subject: subject.to_owned(),
            store,
            _permits: (plugin_permit, slot_permit),
            _running: self
                .in_flight
                .start(&self.name, subject, self.policy.timeout),
        })
    }
}

/// One call in progress: its Store and the permits it holds.
struct Call<'p> {
    plugin: &'p Plugin,
    subject: String,
    store: Store<CallState>,
    _permits: (SemaphorePermit<'p>, SemaphorePermit<'p>),
    _running: InFlight,
}

enum Outcome<T> {
    Done(wasmtime::Result<T>),
    Abandoned,
}

impl Call<'_> {
    /// Runs `f` on the Store, abandoning it if it outlives the budget (a guest
    /// blocked in a host call cannot be interrupted by epochs).
    async fn bounded<T>(
        &mut self,
        f: impl AsyncFnOnce(&mut Store<CallState>) -> wasmtime::Result<T>,
    ) -> Outcome<T> {
        let limit = self.plugin.policy.timeout + HOST_CALL_GRACE;
        match tokio::time::timeout(limit, f(&mut self.store)).await {
            Ok(result) => Outcome::Done(result),
            Err(_) => Outcome::Abandoned,
        }
    }

    /// Turns the raw outcome into the plugin's answer or a [`CallError`].
    fn finish<T>(self, outcome: Outcome<T>) -> Result<T, CallError> {
        let state = self.store.data();
        state.log.finish();
        let stdout = state.stdout.text();
        if !stdout.trim().is_empty() {
            tracing::debug!(target: "plugin", plugin = %self.plugin.name, subject = %self.subject, stdout = %truncate(&stdout, 4096), "plugin wrote to stdout");
        }
        let plugin = self.plugin.name.to_string();
        let subject = self.subject;
        let timeout = || CallError::Timeout {
            plugin: plugin.clone(),
            subject: subject.clone(),
            budget: self.plugin.policy.timeout,
        };
        let err = match outcome {
            Outcome::Done(Ok(value)) => return Ok(value),
            Outcome::Abandoned => return Err(timeout()),
            Outcome::Done(Err(err)) => err,
        };
        if let Some(limit) = err.downcast_ref::<MemoryLimitExceeded>() {
            return Err(CallError::MemoryLimit {
                plugin,
                subject,
                exceeded: MemoryLimitExceeded {
                    desired: limit.desired,
                    limit: limit.limit,
                },
            });
        }
        if let Some(Trap::Interrupt) = err.downcast_ref::<Trap>() {
            return Err(timeout());
        }
        let mut message = match err.downcast_ref::<Trap>() {
            Some(trap) => trap.to_string(),
            None => format!("{err:#}"),
        };
        // wasmtime's error for MAX_HOSTCALL_BYTES (its type is private).
        if message.contains("fuel allocated for hostcalls has been exhausted") {
            message = format!(
                "it passed or returned more than {} MiB at once, the most the host copies out of a plugin in one call ({message})",
                super::sandbox::MAX_HOSTCALL_BYTES >> 20
            );
        }
        // The error can quote the guest (its names, its strings).
        let message = escape_control(&message).into_owned();
        Err(CallError::Trap {
            plugin,
            subject,
            message,
            stderr: state.stderr.text(),
        })
    }
}
