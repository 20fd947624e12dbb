//! Per-call resource limits enforced inside the Store.

use wasmtime::ResourceLimiter;

/// The error that ends a call whose memory would grow past its cap.
///
/// Wasmtime reports a failed grow as an ordinary error, not a `Trap`, so the
/// limiter raises this typed error and the caller finds it by downcasting.
#[derive(Debug, thiserror::Error)]
#[error("memory limit exceeded: the plugin tried to grow its memory to {desired} bytes, above its limit of {limit} bytes")]
pub struct MemoryLimitExceeded {
    pub desired: usize,
    pub limit: usize,
}

/// Caps the linear memory and table size of every instance in a call.
pub struct CallLimiter {
    memory_limit: usize,
}

/// Tables hold function references; a component needs a few thousand at most.
const MAX_TABLE_ELEMENTS: usize = 100_000;

impl CallLimiter {
    pub fn new(memory_limit: u64) -> Self {
        Self {
            memory_limit: usize::try_from(memory_limit).unwrap_or(usize::MAX),
        }
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            // Ending the call (instead of returning Ok(false)) gives every
            // language the same clear outcome: some guests would otherwise
            // spin, abort without a message, or misbehave on a NULL malloc.
            return Err(wasmtime::Error::new(MemoryLimitExceeded {
                desired,
                limit: self.memory_limit,
            }));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }
}
