//! Noticing another controller that keeps undoing our volume finalizer
//! writes: a replaced provisioner still serving the same name with the
//! opposite `--add-finalizer`. Each side's write wakes the other, so
//! without this the two would add and remove the finalizer for ever.
//!
//! Only writes that changed the volume are recorded. The host writes the
//! finalizer only when the freshest copy lacks it (or has it, to remove),
//! so a second write in the same direction proves someone undid the first.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Undone writes in a row after which the host stops writing.
pub const LIMIT: u32 = 3;

/// An undo counts only this soon after our write: two controllers fight at
/// API speed, while someone editing a volume by hand now and then is not
/// a fight.
pub const WINDOW: Duration = Duration::from_secs(10 * 60);

/// Entries kept before the first pruning of deleted volumes.
const MIN_PRUNE: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Add,
    Remove,
}

/// What to do about a finalizer write the host is about to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Write,
    /// Our write was undone this many times: stop now, and say so (once).
    Conflict {
        undone: u32,
    },
    /// Stopped earlier: leave the finalizer alone.
    Stopped,
}

/// Finalizer writes per volume uid.
#[derive(Debug, Default)]
pub struct FinalizerConflicts {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    volumes: HashMap<String, Writes>,
    /// The size at which deleted volumes are next dropped.
    prune_at: usize,
}

#[derive(Debug)]
struct Writes {
    direction: Direction,
    at: Instant,
    /// Writes in a row undone by someone else.
    undone: u32,
    stopped: bool,
}

impl Writes {
    /// Whether writing `direction` at `now` means our last write was undone.
    fn undone_by(&self, direction: Direction, now: Instant) -> bool {
        self.direction == direction && now.saturating_duration_since(self.at) <= WINDOW
    }
}

impl FinalizerConflicts {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Before writing `direction` on volume `uid`.
    pub fn before(&self, uid: &str, direction: Direction, now: Instant) -> Verdict {
        let mut state = self.lock();
        let Some(w) = state.volumes.get_mut(uid) else {
            return Verdict::Write;
        };
        if w.stopped {
            return Verdict::Stopped;
        }
        if w.undone_by(direction, now) && w.undone + 1 >= LIMIT {
            w.undone += 1;
            w.stopped = true;
            return Verdict::Conflict { undone: w.undone };
        }
        Verdict::Write
    }

    /// After a write of `direction` that changed volume `uid`.
    pub fn wrote(&self, uid: &str, direction: Direction, now: Instant) {
        let mut state = self.lock();
        match state.volumes.get_mut(uid) {
            Some(w) => {
                w.undone = if w.undone_by(direction, now) {
                    w.undone + 1
                } else {
                    0
                };
                w.direction = direction;
                w.at = now;
            }
            None => {
                let first = Writes {
                    direction,
                    at: now,
                    undone: 0,
                    stopped: false,
                };
                state.volumes.insert(uid.to_owned(), first);
            }
        }
    }

    /// The volume is gone (or reclaimed): forget it.
    pub fn forget(&self, uid: &str) {
        self.lock().volumes.remove(uid);
    }

    /// Drops the volumes no longer in `live` (uids), but only once the
    /// entries doubled since last time, so the cost stays proportional to
    /// the writes while the map never outgrows twice the live volumes.
    pub fn prune(&self, live: impl FnOnce() -> HashSet<String>) {
        let mut state = self.lock();
        if state.volumes.len() < state.prune_at.max(MIN_PRUNE) {
            return;
        }
        let live = live();
        state.volumes.retain(|uid, _| live.contains(uid));
        state.prune_at = state.volumes.len() * 2;
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().volumes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::Direction::{Add, Remove};
    use super::*;

    /// Tries a write at `now`; records it when allowed.
    fn write(c: &FinalizerConflicts, uid: &str, d: Direction, now: Instant) -> Verdict {
        let verdict = c.before(uid, d, now);
        if verdict == Verdict::Write {
            c.wrote(uid, d, now);
        }
        verdict
    }

    #[test]
    fn alternating_directions_never_conflict() {
        let c = FinalizerConflicts::default();
        let start = Instant::now();
        for i in 0..100u64 {
            let d = if i % 2 == 0 { Add } else { Remove };
            let now = start + Duration::from_millis(i);
            assert_eq!(write(&c, "v", d, now), Verdict::Write, "write {i}");
        }
    }

    #[test]
    fn the_limit_of_undone_writes_in_one_direction_stops_writing_for_good() {
        for d in [Add, Remove] {
            let c = FinalizerConflicts::default();
            let start = Instant::now();
            let at = |ms| start + Duration::from_millis(ms);
            // The first write, then LIMIT - 1 rewrites of what was undone.
            for i in 0..LIMIT as u64 {
                assert_eq!(write(&c, "v", d, at(i)), Verdict::Write, "write {i}");
            }
            assert_eq!(
                write(&c, "v", d, at(10)),
                Verdict::Conflict { undone: LIMIT }
            );
            // Said once; silent afterwards, whatever the direction.
            assert_eq!(write(&c, "v", d, at(11)), Verdict::Stopped);
            assert_eq!(write(&c, "v", Add, at(12)), Verdict::Stopped);
            assert_eq!(write(&c, "v", Remove, at(13)), Verdict::Stopped);
            // Other volumes are unaffected.
            assert_eq!(write(&c, "w", d, at(14)), Verdict::Write);
        }
    }

    #[test]
    fn a_write_in_the_other_direction_starts_the_count_over() {
        let c = FinalizerConflicts::default();
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        for i in 0..LIMIT as u64 {
            assert_eq!(write(&c, "v", Add, at(i)), Verdict::Write);
        }
        assert_eq!(write(&c, "v", Remove, at(10)), Verdict::Write);
        for i in 0..LIMIT as u64 {
            assert_eq!(write(&c, "v", Add, at(20 + i)), Verdict::Write);
        }
        assert!(matches!(
            write(&c, "v", Add, at(30)),
            Verdict::Conflict { .. }
        ));
    }

    #[test]
    fn undos_far_apart_are_not_a_fight() {
        let c = FinalizerConflicts::default();
        let start = Instant::now();
        for i in 0..10 {
            let now = start + (WINDOW + Duration::from_secs(1)) * i;
            assert_eq!(write(&c, "v", Add, now), Verdict::Write, "write {i}");
        }
    }

    #[test]
    fn deleted_volumes_are_dropped_once_the_map_doubles() {
        let c = FinalizerConflicts::default();
        let now = Instant::now();
        let live: HashSet<String> = (0..10).map(|i| format!("live-{i}")).collect();
        for uid in &live {
            c.wrote(uid, Add, now);
        }
        let mut prunes = 0;
        for i in 0..10 * MIN_PRUNE {
            c.wrote(&format!("gone-{i}"), Add, now);
            c.prune(|| {
                prunes += 1;
                live.clone()
            });
            assert!(c.len() <= MIN_PRUNE, "{} entries", c.len());
        }
        // Not at every write: after growing to MIN_PRUNE, from 10 live ones.
        assert_eq!(prunes, 10 * MIN_PRUNE / (MIN_PRUNE - 10));
        c.forget("live-0");
        c.prune(|| unreachable!("below the mark"));
        assert!(c.len() < MIN_PRUNE);
    }
}
