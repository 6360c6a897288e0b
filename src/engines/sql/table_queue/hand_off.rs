//! The sender's side of a hand-off (see `crate::queue::hand_off`): a send of one due message
//! that finds a consumer of its queue idle in this process stores it already claimed for that
//! consumer, where the dialect can (`SqlDialect::CLAIMS_ON_INSERT`), so the consumer's wake-up
//! costs no claim of its own. What is stored but cannot be given goes back to the queue.

use super::TableQueue;
use crate::engines::sql::claim_doubt::{stamp_span_ms, ClaimAttempt, InFlight};
use crate::engines::sql::dialect::{ClaimedInsert, SqlDialect};
use crate::engines::sql::ids::claimed_rows;
use crate::queue::engine::{Engine, NewMessage};
use crate::support::error::Result;

impl<D: SqlDialect> TableQueue<D> {
    /// Stores a send of one due message claimed for an idle consumer of this process and hands
    /// it over (see `crate::queue::hand_off`), where the dialect can and a consumer waits: what
    /// was stored (and whether the consumer had left), or `None` when it was not stored so and
    /// goes the ordinary way.
    pub(super) async fn hand_off(&self, messages: &[NewMessage]) -> Result<Option<Handed>> {
        // An idle consumer's wake-up is a send of one; a batch means the queue is busy.
        let [message] = messages else {
            return Ok(None);
        };
        if !D::CLAIMS_ON_INSERT
            || message.body.len() + message.headers.len() > MAX_HANDED_BYTES
            || message.delay_ms > 0.0
        {
            return Ok(None);
        }
        let Some(taker) = self.hand_off.take() else {
            return Ok(None);
        };
        // Dropped mid-insert (the send's bound ran out), the rows it may have stored claimed
        // are owed a release like a claim's whose reply was lost.
        let mut in_flight = InFlight::new(
            &self.in_doubt,
            ClaimAttempt::new(stamp_span_ms(self.claim_lease())),
        );
        let inserted = D::insert_claimed(&self.cx, message, in_flight.attempt()).await;
        let mut attempt = in_flight.answered();
        match inserted {
            ClaimedInsert::Stored(rows) => {
                let ids = rows.iter().map(|r| r.id.clone()).collect();
                let token = rows.first().and_then(|r| r.token?.delivered_at());
                let given_back = match taker.give(rows) {
                    Ok(()) => {
                        // A live claim of this process: later releases by residue spare it.
                        if let Some(token) = token {
                            self.cx.target.recent_claims.note(token);
                        }
                        false
                    }
                    // The consumer stopped waiting meanwhile: the rows go back to the queue.
                    // The sender releases them after the send; recorded as owed first, they
                    // are released by the queue's next claim in this process (whichever
                    // transport makes it: woken here) should that fail, as a transport that
                    // only sends never claims.
                    Err(rows) => {
                        attempt.hold(claimed_rows(&rows));
                        self.in_doubt.record(attempt);
                        self.wake.wake();
                        true
                    }
                };
                Ok(Some(Handed { ids, given_back }))
            }
            ClaimedInsert::NotStored => Ok(None),
            ClaimedInsert::InDoubt(err) => {
                // Released at once if the server can be reached, else by the next claim or
                // by `close()`; the send says the messages may have been stored.
                self.in_doubt.record(attempt);
                self.release_in_doubt().await;
                self.wake.wake();
                Err(self.cx.target.write_error("send", "the messages", &err))
            }
        }
    }
}

/// A send stored claimed by [`TableQueue::hand_off`].
pub(super) struct Handed {
    pub ids: Vec<String>,
    /// The consumer had stopped waiting: the rows are owed a release.
    pub given_back: bool,
}

/// The largest message a send hands straight to an idle consumer.
const MAX_HANDED_BYTES: usize = 64 * 1024;
