//! What `transport.stats()` reports: counters bumped on the paths they count (relaxed atomics,
//! no lock on the hot path; the last error is kept under a lock taken only when one happens)
//! and a snapshot of the queue's buffers, read synchronously. Also the events an operator must
//! know (the `logger` option), kept only once a logger asked for them, and pulled by JavaScript:
//! no call into JavaScript from a Rust thread.

use crate::support::error::Error;
use crate::support::locks::Locked;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// Events kept between two pulls; older ones are dropped (and counted) past it.
const MAX_EVENTS: usize = 100;

/// How loud an event is, as a NestJS `LoggerService` method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Log,
    Warn,
    Error,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Self::Log => "log",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }
}

/// Something an operator must know, in words (never a secret: errors are redacted when made).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub level: Level,
    pub message: String,
}

#[derive(Default)]
pub struct Counters {
    sent: AtomicU64,
    claims: AtomicU64,
    claimed: AtomicU64,
    empty_claims: AtomicU64,
    acked: AtomicU64,
    rejected: AtomicU64,
    reconnects: AtomicU64,
    last_claim_size: AtomicU64,
    last_claim_micros: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// A logger wants events (until then `report` keeps nothing).
    watching: AtomicBool,
    events: Mutex<VecDeque<Event>>,
    events_dropped: AtomicU64,
    tracked_ids: AtomicU64,
}

/// One reading of a queue's counters and buffers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Claimed rows waiting in the prefetch buffer.
    pub buffered: u64,
    /// Delivered messages whose handler has not settled them.
    pub in_flight: u64,
    /// Write-behind acks recorded and not yet written.
    pub pending_acks: u64,
    /// How long write-behind ack writes have been failing, if they are (ms).
    pub ack_write_failing_ms: Option<f64>,
    /// Messages stored by send().
    pub sent: u64,
    /// Claims that returned rows, and the rows they returned.
    pub claims: u64,
    pub claimed: u64,
    /// Claims that found nothing to take (an idle consumer's wasted round trips).
    pub empty_claims: u64,
    /// Polls this process ran for the idle consumers of the queue's table (one answers for
    /// every queue of it; 0 where idle consumers wait without polling).
    pub shared_polls: u64,
    pub acked: u64,
    pub rejected: u64,
    /// The last claim that returned rows: how many, and how long its statement took (0 ms
    /// for rows an idle wait claimed).
    pub last_claim_size: u64,
    pub last_claim_ms: f64,
    /// Times a consumer had its server back after riding out a connection failure.
    pub reconnects: u64,
    /// Settles that came after this process's claim had been taken over (ignored).
    pub stale_settles: u64,
    /// Claimed ids kept for this instance's claims (the tokens of held claims, a Redis
    /// consumer's pending entries it holds); stays within what was claimed recently.
    pub tracked_ids: u64,
    /// The last error met (its message carries no secret: errors are redacted when made).
    pub last_error: Option<String>,
}

impl Counters {
    pub fn sent(&self, count: usize) {
        self.sent.fetch_add(count as u64, Relaxed);
    }

    pub fn claimed(&self, count: usize, took: Option<Duration>) {
        self.claims.fetch_add(1, Relaxed);
        self.claimed.fetch_add(count as u64, Relaxed);
        self.last_claim_size.store(count as u64, Relaxed);
        let micros = took.map_or(0, |d| d.as_micros().min(u128::from(u64::MAX)) as u64);
        self.last_claim_micros.store(micros, Relaxed);
    }

    pub fn claimed_nothing(&self) {
        self.empty_claims.fetch_add(1, Relaxed);
    }

    pub fn acked(&self) {
        self.acked.fetch_add(1, Relaxed);
    }

    pub fn rejected(&self) {
        self.rejected.fetch_add(1, Relaxed);
    }

    pub fn track_ids(&self, count: usize) {
        self.tracked_ids.store(count as u64, Relaxed);
    }

    pub fn reconnected(&self) {
        self.reconnects.fetch_add(1, Relaxed);
    }

    pub fn failed(&self, err: &Error) {
        *self.last_error.locked() = Some(err.to_string());
    }

    /// From now on, events are kept for `take_events`.
    pub fn watch_events(&self) {
        self.watching.store(true, Relaxed);
    }

    pub fn report(&self, level: Level, message: impl Into<String>) {
        if !self.watching.load(Relaxed) {
            return;
        }
        let mut events = self.events.locked();
        if events.len() >= MAX_EVENTS {
            events.pop_front();
            self.events_dropped.fetch_add(1, Relaxed);
        }
        events.push_back(Event {
            level,
            message: message.into(),
        });
    }

    /// The events kept since the last call, oldest first, after a line for any dropped.
    pub fn take_events(&self) -> Vec<Event> {
        let mut taken: Vec<Event> = Vec::new();
        let dropped = self.events_dropped.swap(0, Relaxed);
        if dropped > 0 {
            taken.push(Event {
                level: Level::Warn,
                message: format!("{dropped} earlier events were dropped (more than {MAX_EVENTS} between two reads)."),
            });
        }
        taken.extend(self.events.locked().drain(..));
        taken
    }

    /// The counters, with the buffer figures the queue fills in.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            sent: self.sent.load(Relaxed),
            claims: self.claims.load(Relaxed),
            claimed: self.claimed.load(Relaxed),
            empty_claims: self.empty_claims.load(Relaxed),
            acked: self.acked.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            last_claim_size: self.last_claim_size.load(Relaxed),
            last_claim_ms: self.last_claim_micros.load(Relaxed) as f64 / 1000.0,
            reconnects: self.reconnects.load(Relaxed),
            tracked_ids: self.tracked_ids.load(Relaxed),
            last_error: self.last_error.locked().clone(),
            ..Snapshot::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_sets_the_last_size_and_duration_and_adds_to_the_totals() {
        let counters = Counters::default();
        counters.claimed(16, Some(Duration::from_micros(1500)));
        counters.claimed(3, None);
        let s = counters.snapshot();
        assert_eq!((s.claims, s.claimed, s.last_claim_size), (2, 19, 3));
        assert_eq!(s.last_claim_ms, 0.0);
        counters.claimed(5, Some(Duration::from_micros(2500)));
        assert_eq!(counters.snapshot().last_claim_ms, 2.5);
    }

    #[test]
    fn events_are_kept_only_once_watched_and_bounded() {
        let counters = Counters::default();
        counters.report(Level::Warn, "before");
        assert!(counters.take_events().is_empty());
        counters.watch_events();
        for n in 0..MAX_EVENTS + 3 {
            counters.report(Level::Log, format!("e{n}"));
        }
        let events = counters.take_events();
        assert_eq!(events.len(), MAX_EVENTS + 1);
        assert!(events[0]
            .message
            .starts_with("3 earlier events were dropped"));
        assert_eq!(events[1].message, "e3");
        assert!(counters.take_events().is_empty());
    }

    #[test]
    fn the_last_error_is_the_latest_one() {
        let counters = Counters::default();
        assert_eq!(counters.snapshot().last_error, None);
        counters.failed(&Error::transport("first"));
        counters.failed(&Error::transport("second"));
        assert!(counters
            .snapshot()
            .last_error
            .is_some_and(|e| e.contains("second")));
    }
}
