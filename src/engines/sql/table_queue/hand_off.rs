//! The sender's side of a hand-off (see `crate::queue::hand_off`): a send of one due message
//! that finds a consumer of its queue idle in this process stores it already claimed for that
//! consumer, where the dialect can (`SqlDialect::CLAIMS_ON_INSERT`), so the consumer's wake-up
//! costs no claim of its own. What is stored but cannot be given goes back to the queue.

use super::TableQueue;
use crate::engines::sql::claim_doubt::{stamp_span_ms, ClaimAttempt};
use crate::engines::sql::dialect::{ClaimedInsert, SqlDialect};
use crate::engines::sql::ids::claimed_rows;
use crate::queue::engine::{Engine, NewMessage};
use crate::support::error::Result;

impl<D: SqlDialect> TableQueue<D> {
    /// Stores a send of one due message claimed for an idle consumer of this process and hands
    /// it over (see `crate::queue::hand_off`), where the dialect can and a consumer waits: its
    /// id, or `None` when it was not stored so and goes the ordinary way.
    pub(super) async fn hand_off(&self, messages: &[NewMessage]) -> Result<Option<Vec<String>>> {
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
        let mut attempt = ClaimAttempt::new(stamp_span_ms(self.claim_lease()));
        match D::insert_claimed(&self.cx, message, &mut attempt).await {
            ClaimedInsert::Stored(rows) => {
                let ids = rows.iter().map(|r| r.id.clone()).collect();
                let token = rows.first().and_then(|r| r.token);
                match taker.give(rows) {
                    Ok(()) => {
                        // A live claim of this process: later releases by residue spare it.
                        if let Some(token) = token {
                            self.cx.target.recent_claims.note(token);
                        }
                    }
                    // The consumer stopped waiting meanwhile: the rows go back to the queue,
                    // released by the next claim of any of its transports in this process
                    // (woken here), not by this send: the send is stored and says so, and a
                    // release that failed here (the server going away) would have left them
                    // to a transport that may never claim.
                    Err(rows) => {
                        attempt.hold(claimed_rows(&rows));
                        self.in_doubt.record(attempt);
                        self.wake.wake();
                    }
                }
                Ok(Some(ids))
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

/// The largest message a send hands straight to an idle consumer.
const MAX_HANDED_BYTES: usize = 64 * 1024;
