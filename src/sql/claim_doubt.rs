//! Claims whose outcome is in doubt: the connection was lost (or the statement bound ran out)
//! after the claim was sent and before its reply came back, so it may have committed and left
//! its rows marked delivered to nobody, hidden until the lease (an hour by default). The
//! shared schema records no claimer, so each attempt carries what identifies its rows should
//! the reply be lost, and the next claim on the queue releases them first:
//! - MySQL knows its rows and token before it commits ([`ClaimAttempt::hold`]): exact;
//! - PostgreSQL claims in one statement whose reply is all there is, so its claim stamps
//!   `delivered_at` with a client-chosen millisecond ([`ClaimAttempt::nonce`], the stamp's
//!   residue modulo [`STAMP_SPAN_MS`], at most that much before `now()`) and the release
//!   takes the rows carrying that residue in the window the attempt could have run in.
//!   Another claim committed in the same window with the same residue (1 in
//!   [`STAMP_SPAN_MS`]) is released too: its messages are delivered twice, never lost, and its
//!   consumer's settles are fenced.

use super::ids::HeldRow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Width of the residue a PostgreSQL claim stamp carries, in milliseconds: the stamp is at
/// most this much earlier than `now()`, so a lease is at most this much shorter.
pub const STAMP_SPAN_MS: i64 = 100;

/// The most attempts kept in doubt: each failed attempt of a long outage adds one, and the
/// oldest ones' rows come back at their lease anyway.
const MAX_IN_DOUBT: usize = 64;

/// One claim attempt, and what identifies its rows if its reply is lost.
#[derive(Debug)]
pub struct ClaimAttempt {
    /// The PostgreSQL stamp's residue, in `0..STAMP_SPAN_MS`.
    pub nonce: i64,
    sent: Instant,
    rows: Mutex<Vec<HeldRow>>,
}

impl ClaimAttempt {
    fn new() -> Self {
        let nonce = (crate::backoff::unit_jitter() * STAMP_SPAN_MS as f64) as i64;
        Self {
            nonce: nonce.clamp(0, STAMP_SPAN_MS - 1),
            sent: Instant::now(),
            rows: Mutex::default(),
        }
    }

    /// Notes the rows (with their token) the attempt is about to commit.
    pub fn hold(&self, rows: Vec<HeldRow>) {
        *self.rows.lock().unwrap_or_else(|p| p.into_inner()) = rows;
    }

    /// The rows noted by [`ClaimAttempt::hold`] (none on PostgreSQL).
    pub fn held(&self) -> Vec<HeldRow> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How far back, from now, the attempt's statement can have run (with a margin for the
    /// round trip of the release that asks).
    pub fn window(&self) -> Duration {
        self.sent.elapsed() + Duration::from_secs(1)
    }
}

/// The claim attempts of one queue whose outcome is in doubt.
#[derive(Debug, Default)]
pub struct InDoubt {
    attempts: Mutex<Vec<Arc<ClaimAttempt>>>,
}

impl InDoubt {
    /// A new attempt, in doubt from now until [`InDoubt::settled`] says otherwise: a claim
    /// dropped at its bound (no reply at all) stays in doubt.
    pub fn begin(&self) -> Arc<ClaimAttempt> {
        let attempt = Arc::new(ClaimAttempt::new());
        let mut attempts = self.lock();
        if attempts.len() >= MAX_IN_DOUBT {
            attempts.remove(0);
        }
        attempts.push(attempt.clone());
        attempt
    }

    /// The attempt's outcome is known: it answered, it never reached the server, or its rows
    /// were released.
    pub fn settled(&self, attempt: &Arc<ClaimAttempt>) {
        self.lock().retain(|a| !Arc::ptr_eq(a, attempt));
    }

    /// The attempts still in doubt whose rows can still be hidden: younger than the lease
    /// (older ones are forgotten: their rows are claimable again already).
    pub fn pending(&self, lease: Duration) -> Vec<Arc<ClaimAttempt>> {
        let mut attempts = self.lock();
        attempts.retain(|a| a.sent.elapsed() < lease);
        attempts.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<ClaimAttempt>>> {
        self.attempts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether a claim that failed with `err` may have committed: the connection was lost without
/// an answer. A server's error answer (the statement was rolled back, or never ran) and a
/// pool that gave no connection leave no doubt.
pub fn may_have_committed(err: &sqlx::Error, failure: super::errors::Failure) -> bool {
    failure == super::errors::Failure::Connection
        && !matches!(
            err,
            sqlx::Error::Database(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonces_stay_in_the_span() {
        for _ in 0..1000 {
            let a = ClaimAttempt::new();
            assert!((0..STAMP_SPAN_MS).contains(&a.nonce));
        }
    }

    #[test]
    fn settled_attempts_leave_and_unsettled_ones_stay() {
        let doubt = InDoubt::default();
        let answered = doubt.begin();
        let lost = doubt.begin();
        doubt.settled(&answered);
        let pending = doubt.pending(Duration::from_secs(60));
        assert_eq!(pending.len(), 1);
        assert!(Arc::ptr_eq(&pending[0], &lost));
        doubt.settled(&lost);
        assert!(doubt.pending(Duration::from_secs(60)).is_empty());
    }

    #[test]
    fn attempts_older_than_the_lease_are_dropped() {
        let doubt = InDoubt::default();
        doubt.begin();
        assert!(doubt.pending(Duration::ZERO).is_empty());
        assert!(doubt.pending(Duration::from_secs(60)).is_empty());
    }

    #[test]
    fn at_most_a_bounded_number_are_kept() {
        let doubt = InDoubt::default();
        for _ in 0..(MAX_IN_DOUBT + 10) {
            doubt.begin();
        }
        assert_eq!(doubt.pending(Duration::from_secs(60)).len(), MAX_IN_DOUBT);
    }
}
