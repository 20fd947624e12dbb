//! The calls running now, so that one stuck past its budget is seen.
//!
//! A call is ended at its time budget by epoch interruption (guest code) or
//! by a timer around it (a host function that awaits). Neither reaches a
//! filesystem call running inline on the calling thread: a network
//! filesystem that hangs without `networkFilesystem: true`, say. Such a call
//! stays here, and [`CallsInFlight::stuck`] names it, so the host reports
//! not-ready (`/readyz`) instead of silently losing a thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long past its budget a call may still be running before it counts as
/// stuck: the timer around a call fires one second past the budget.
pub const STUCK_AFTER: Duration = Duration::from_secs(10);

#[derive(Clone, Default)]
pub struct CallsInFlight {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    next: AtomicU64,
    running: Mutex<HashMap<u64, Running>>,
    /// Woken when a call starts: the epoch ticker, which rests while none
    /// runs.
    waker: std::sync::OnceLock<std::thread::Thread>,
}

struct Running {
    plugin: Arc<str>,
    subject: String,
    started: Instant,
    budget: Duration,
}

/// A running call; dropping it (the call ended or was abandoned) removes it.
pub struct InFlight {
    inner: Arc<Inner>,
    id: u64,
}

impl CallsInFlight {
    pub fn start(&self, plugin: &Arc<str>, subject: &str, budget: Duration) -> InFlight {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let running = Running {
            plugin: plugin.clone(),
            subject: subject.to_owned(),
            started: Instant::now(),
            budget,
        };
        self.lock().insert(id, running);
        if let Some(waker) = self.inner.waker.get() {
            waker.unpark();
        }
        InFlight {
            inner: self.inner.clone(),
            id,
        }
    }

    /// Whether no call is running.
    pub fn idle(&self) -> bool {
        self.lock().is_empty()
    }

    /// Unparks `thread` each time a call starts.
    pub fn wake_on_start(&self, thread: std::thread::Thread) {
        let _ = self.inner.waker.set(thread);
    }

    /// The calls running more than [`STUCK_AFTER`] past their budget, each
    /// described for an operator.
    pub fn stuck(&self) -> Vec<String> {
        self.stuck_at(Instant::now())
    }

    fn stuck_at(&self, now: Instant) -> Vec<String> {
        let mut stuck: Vec<String> = self
            .lock()
            .values()
            .filter(|r| now.duration_since(r.started) > r.budget + STUCK_AFTER)
            .map(|r| {
                format!(
                    "plugin {}'s call for {} has run {}s, past its {:?} budget: a host thread is blocked in a filesystem call (a network filesystem needs networkFilesystem: true in the plugin's policy)",
                    r.plugin,
                    r.subject,
                    now.duration_since(r.started).as_secs(),
                    r.budget
                )
            })
            .collect();
        stuck.sort();
        stuck
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Running>> {
        self.inner
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.inner
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_past_its_budget_is_stuck_until_it_ends() {
        let calls = CallsInFlight::default();
        let plugin: Arc<str> = "hostpath".into();
        let slow = calls.start(&plugin, "pvc-1", Duration::from_secs(5));
        let _quick = calls.start(&plugin, "pvc-2", Duration::from_secs(60));
        let now = Instant::now();
        assert!(calls.stuck_at(now).is_empty());
        let later = now + Duration::from_secs(16);
        let stuck = calls.stuck_at(later);
        assert_eq!(stuck.len(), 1, "{stuck:?}");
        assert!(
            stuck[0]
                .starts_with("plugin hostpath's call for pvc-1 has run 16s, past its 5s budget"),
            "{stuck:?}"
        );
        drop(slow);
        assert!(calls.stuck_at(later).is_empty());
    }
}
