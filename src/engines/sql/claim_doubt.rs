//! Claims whose outcome is in doubt: the connection was lost after the claim was sent and
//! before its reply came back, so it may have committed and left its rows marked delivered to
//! nobody, hidden until the lease (an hour by default). The shared schema records no claimer,
//! so each attempt carries what identifies its rows should the reply be lost, and the next
//! claim on the queue releases them first:
//! - a claim (PostgreSQL and MySQL alike) runs in a transaction that knows its rows and their
//!   token before it commits ([`ClaimAttempt::hold`]): should the commit's reply be lost, the
//!   release takes exactly those rows, fenced by the token, however long ago it ran, and never
//!   another consumer's claim. A reply lost before the commit went out leaves nothing to
//!   release: the server rolls the transaction back.
//! - a send stored claimed for an idle consumer (`hand_off`) is one statement whose reply is
//!   all there is, so it stamps `delivered_at` with a client-chosen millisecond: the stamp's
//!   residue modulo a span ([`stamp_span_ms`], a tenth of the lease in whole 10 ms, 10 to
//!   100 ms) is the attempt's nonce, and the stamp is at most a span after `now()`. Later,
//!   never earlier: a consumer with a shorter lease (an upstream worker, a reaper) must not take
//!   a live claim over early; at most a span late is harmless. The release takes the queue's
//!   rows with that residue stamped in the time the attempt can have run in, except the claims
//!   this process made meanwhile ([`RecentClaims`]). Another process's claim committed in that
//!   window with the same residue is released too: its messages are delivered twice, never
//!   lost, and its consumer's settles are fenced. Claims stamp a residue as well (the
//!   statement is shared), so that such a release can tell them from renewals: a renewal's
//!   message is in a handler right now, and a renewal stamps a whole multiple of
//!   [`RENEWAL_GRAIN_MS`], every span is one too, and no nonce is, so no release takes a
//!   renewal, whatever the leases of the consumer that renewed and of the one that releases.
//!
//! An in-flight attempt that its caller stops waiting for ([`InFlight`], dropped when a bound
//! runs out mid-statement) is kept in doubt like one whose reply was lost. A stamped insert
//! that got no answer within the window can have run at any time since; it is not guessed at,
//! and its row comes back at its lease.

use super::ids::HeldRow;
use crate::support::locks::Locked;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest a failed attempt may have been in flight and still be released: the wider
/// the window, the more claims of others can share its residue.
const MAX_DOUBT_WINDOW: Duration = Duration::from_secs(5);

/// The most attempts kept in doubt: each failed attempt of a long outage adds one, and the
/// oldest ones' rows come back at their lease anyway.
const MAX_IN_DOUBT: usize = 64;

/// Every PostgreSQL renewal stamps a whole multiple of this many milliseconds (at most this
/// much later than `now()`). Every span is a multiple of it too and no nonce is, so a
/// renewal's stamp never carries a claim's residue.
pub const RENEWAL_GRAIN_MS: i64 = 10;

/// The span of a PostgreSQL claim stamp's residue for `lease`, in milliseconds: a tenth of the
/// lease rounded down to a multiple of [`RENEWAL_GRAIN_MS`], from 10 to 100 ms (1 in 90 for
/// leases of a second and more, the nonces that are multiples of the grain left out). It is
/// also how much later than `now()` a claim's stamp can be, for every consumer of the queue
/// whatever its own lease: kept small.
pub fn stamp_span_ms(lease: Duration) -> i64 {
    let tenth = (lease.as_millis() / 10).clamp(10, 100) as i64;
    tenth / RENEWAL_GRAIN_MS * RENEWAL_GRAIN_MS
}

/// One claim attempt, and what identifies its rows if its reply is lost.
#[derive(Debug)]
pub struct ClaimAttempt {
    /// The PostgreSQL stamp's residue, in `1..span_ms` and never a multiple of
    /// [`RENEWAL_GRAIN_MS`].
    pub nonce: i64,
    pub span_ms: i64,
    sent: Instant,
    rows: Vec<HeldRow>,
    /// Whether its statement stamps `delivered_at` with the nonce (always on PostgreSQL; on
    /// MySQL, a send stored claimed), so that a release can look for the residue.
    stamped: bool,
}

impl ClaimAttempt {
    pub fn new(span_ms: i64) -> Self {
        let span_ms = span_ms.max(2);
        // The k-th residue in 1..span that is not a multiple of the grain.
        let per_grain = RENEWAL_GRAIN_MS - 1;
        let choices = span_ms - 1 - (span_ms - 1) / RENEWAL_GRAIN_MS;
        let k = ((crate::support::backoff::unit_jitter() * choices as f64) as i64)
            .clamp(0, choices - 1);
        let nonce = k / per_grain * RENEWAL_GRAIN_MS + k % per_grain + 1;
        Self {
            nonce,
            span_ms,
            sent: Instant::now(),
            rows: Vec::new(),
            stamped: false,
        }
    }

    /// Its statement stamps `delivered_at` with the nonce (see [`ClaimAttempt::stamped`]).
    pub fn stamp(&mut self) {
        self.stamped = true;
    }

    /// Whether its statement stamps `delivered_at` with the nonce.
    pub fn stamped(&self) -> bool {
        self.stamped
    }

    /// Notes the rows (with their token) the attempt is about to commit.
    pub fn hold(&mut self, rows: Vec<HeldRow>) {
        self.rows = rows;
    }

    /// The rows noted by [`ClaimAttempt::hold`] (none on PostgreSQL).
    pub fn held(&self) -> &[HeldRow] {
        &self.rows
    }

    /// How far back, from now, the attempt's statement can have run (with a margin for the
    /// round trip of the release that asks).
    pub fn window(&self) -> Duration {
        self.sent.elapsed() + Duration::from_secs(1)
    }

    /// Whether `token` (a claim stamp in microseconds) carries this attempt's residue.
    pub fn matches(&self, token: i64) -> bool {
        (token / 1000).rem_euclid(self.span_ms) == self.nonce
    }
}

/// The claim attempts of one queue whose outcome is in doubt, shared by the queue's transports
/// in the process (whichever claims next releases them).
#[derive(Debug, Default)]
pub struct InDoubt {
    attempts: Mutex<Vec<Arc<ClaimAttempt>>>,
}

impl InDoubt {
    /// Keeps `attempt`, which failed without an answer (or whose rows could not be handed
    /// over), for the next claim to release, unless it noted no rows and was in flight too
    /// long to be told apart from others' claims.
    pub fn record(&self, attempt: ClaimAttempt) {
        // Rows it noted are found by their ids and tokens however long ago it ran.
        if attempt.rows.is_empty() && attempt.sent.elapsed() > MAX_DOUBT_WINDOW {
            return;
        }
        let mut attempts = self.lock();
        if attempts.len() >= MAX_IN_DOUBT {
            attempts.remove(0);
        }
        attempts.push(Arc::new(attempt));
    }

    /// Whether an attempt still waits for its rows to be released.
    pub fn owes_release(&self) -> bool {
        !self.lock().is_empty()
    }

    /// Its rows were released.
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
        self.attempts.locked()
    }
}

/// A claim attempt on its way: recorded in doubt should it be dropped unanswered (the caller's
/// bound ran out mid-statement, and the statement may still commit), so that the next claim
/// releases what it may have taken instead of leaving it hidden until the lease.
pub struct InFlight<'a> {
    in_doubt: &'a InDoubt,
    attempt: Option<ClaimAttempt>,
}

impl<'a> InFlight<'a> {
    pub fn new(in_doubt: &'a InDoubt, attempt: ClaimAttempt) -> Self {
        Self {
            in_doubt,
            attempt: Some(attempt),
        }
    }

    /// The attempt, for the statement to note its rows in.
    pub fn attempt(&mut self) -> &mut ClaimAttempt {
        self.attempt.get_or_insert_with(|| ClaimAttempt::new(0))
    }

    /// The attempt was answered (or failed with an answer): the caller decides its fate.
    pub fn answered(mut self) -> ClaimAttempt {
        self.attempt.take().unwrap_or_else(|| ClaimAttempt::new(0))
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(attempt) = self.attempt.take() {
            self.in_doubt.record(attempt);
        }
    }
}

/// The tokens of the claims this process made lately (on one target, for every queue), so
/// that releasing a lost claim's residue spares the live claims of its neighbours.
#[derive(Debug, Default)]
pub struct RecentClaims {
    tokens: Mutex<VecDeque<(Instant, i64)>>,
}

impl RecentClaims {
    pub fn note(&self, token: i64) {
        let mut tokens = self.lock();
        let now = Instant::now();
        while tokens
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) > RECENT)
        {
            tokens.pop_front();
        }
        if tokens.back().map(|(_, t)| *t) != Some(token) {
            tokens.push_back((now, token));
        }
    }

    /// The recent tokens that carry `attempt`'s residue.
    pub fn sharing_residue(&self, attempt: &ClaimAttempt) -> Vec<i64> {
        self.lock()
            .iter()
            .map(|(_, token)| *token)
            .filter(|token| attempt.matches(*token))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(Instant, i64)>> {
        self.tokens.locked()
    }
}

/// How long a claim's token is remembered: past any window a release looks at.
const RECENT: Duration = Duration::from_secs(MAX_DOUBT_WINDOW.as_secs() + 5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_span_is_a_tenth_of_the_lease_within_bounds() {
        assert_eq!(stamp_span_ms(Duration::from_millis(500)), 50);
        assert_eq!(stamp_span_ms(Duration::from_secs(3600)), 100);
        assert_eq!(stamp_span_ms(Duration::from_millis(20)), 10);
        assert_eq!(stamp_span_ms(Duration::from_millis(999)), 90);
        assert_eq!(stamp_span_ms(Duration::from_millis(150)), 10);
    }

    #[test]
    fn nonces_stay_in_the_span_and_match_their_stamps() {
        for _ in 0..1000 {
            let a = ClaimAttempt::new(100);
            assert!((1..100).contains(&a.nonce));
            let stamp_ms = 1_700_000_000_000 / 100 * 100 + a.nonce;
            assert!(a.matches(stamp_ms * 1000));
            assert!(!a.matches((stamp_ms + 1) * 1000));
        }
    }

    #[test]
    fn every_nonce_but_the_grain_multiples_is_drawn() {
        for span in [2, 10, 37, 100] {
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..20_000 {
                seen.insert(ClaimAttempt::new(span).nonce);
            }
            let expected: std::collections::BTreeSet<i64> =
                (1..span).filter(|n| n % RENEWAL_GRAIN_MS != 0).collect();
            assert_eq!(seen, expected, "span {span}");
        }
    }

    #[test]
    fn no_claim_of_any_lease_matches_a_renewal_of_any_lease() {
        for lease_ms in (0..=1200).step_by(7) {
            let span = stamp_span_ms(Duration::from_millis(lease_ms));
            assert_eq!(span % RENEWAL_GRAIN_MS, 0, "lease {lease_ms} ms");
            for _ in 0..100 {
                let a = ClaimAttempt::new(span);
                for renewal_ms in (1_700_000_000_000..1_700_000_000_200).step_by(10) {
                    assert!(!a.matches(renewal_ms * 1000), "lease {lease_ms} ms, {a:?}");
                }
            }
        }
    }

    #[test]
    fn released_attempts_leave_and_others_stay() {
        let doubt = InDoubt::default();
        doubt.record(ClaimAttempt::new(100));
        doubt.record(ClaimAttempt::new(100));
        let pending = doubt.pending(Duration::from_secs(60));
        assert_eq!(pending.len(), 2);
        doubt.settled(&pending[0]);
        let left = doubt.pending(Duration::from_secs(60));
        assert_eq!(left.len(), 1);
        assert!(Arc::ptr_eq(&left[0], &pending[1]));
    }

    #[test]
    fn attempts_older_than_the_lease_are_dropped() {
        let doubt = InDoubt::default();
        doubt.record(ClaimAttempt::new(100));
        assert!(doubt.pending(Duration::ZERO).is_empty());
        assert!(doubt.pending(Duration::from_secs(60)).is_empty());
    }

    #[test]
    fn at_most_a_bounded_number_are_kept() {
        let doubt = InDoubt::default();
        for _ in 0..(MAX_IN_DOUBT + 10) {
            doubt.record(ClaimAttempt::new(100));
        }
        assert_eq!(doubt.pending(Duration::from_secs(60)).len(), MAX_IN_DOUBT);
    }

    #[test]
    fn recent_claims_sharing_the_residue_are_found() {
        let recent = RecentClaims::default();
        let attempt = ClaimAttempt::new(100);
        let base = 1_700_000_000_000 / 100 * 100;
        recent.note((base + attempt.nonce) * 1000);
        recent.note((base + (attempt.nonce + 1) % 100) * 1000);
        assert_eq!(
            recent.sharing_residue(&attempt),
            vec![(base + attempt.nonce) * 1000]
        );
    }

    #[test]
    fn an_attempt_dropped_on_its_way_is_kept_in_doubt_and_an_answered_one_is_not() {
        let doubt = InDoubt::default();
        let answered = InFlight::new(&doubt, ClaimAttempt::new(100));
        let _ = answered.answered();
        assert!(!doubt.owes_release());
        let mut dropped = InFlight::new(&doubt, ClaimAttempt::new(100));
        dropped.attempt().stamp();
        drop(dropped);
        assert!(doubt.owes_release());
    }
}
