//! The settling side of a queue: acks (write-behind, or awaited group commit), the end of a
//! delivery's claim without a write, and redelivery of a rejected message as a copy.

use super::Queue;
use crate::queue::batch::Waited;
use crate::queue::engine::NewMessage;
use crate::queue::limits::ACK_FLUSH_PATIENCE;
use crate::support::error::{Cause, Error, Result};
use crate::support::locks::Locked;
use std::sync::atomic::Ordering;

impl Queue {
    pub(super) fn guard_not_closed(&self, what: &str) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::closed(format!(
                "Cannot {what} on a transport that is closed."
            )))
        } else {
            Ok(())
        }
    }

    /// Records an ack whose delete the write-behind flusher writes (needs a runtime context).
    pub fn ack_later(&self, id: String) -> Result<()> {
        self.guard_not_closed("ack")?;
        self.settled(&id);
        self.acks_behind.push(id);
        self.counters.acked();
        Ok(())
    }

    /// Stops renewing the claim of a delivered row: its handler is done (acked, rejected, or
    /// given up by JavaScript without a write).
    pub fn settled(&self, id: &str) {
        self.buffer.locked().in_flight.remove(id);
    }

    /// A delivered row JavaScript gave up without a write: no longer renewed, its claim
    /// lapses at the lease.
    pub fn given_up(&self, id: &str) {
        self.settled(id);
        self.fence.forget(&[id.to_owned()]);
    }

    /// Waits until every write-behind ack is written (retried meanwhile; reported if it
    /// still fails after `ACK_FLUSH_PATIENCE`).
    pub async fn flush_acks(&self) -> Result<()> {
        let flushed = self.acks_behind.flush(ACK_FLUSH_PATIENCE).await;
        self.observe(flushed)
    }

    pub async fn ack(&self, id: &str) -> Result<()> {
        self.guard_not_closed("ack")?;
        self.settled(id);
        let bound = self.engine.send_bound();
        let written = match self.acks.enqueue(id.to_owned())?.within(bound).await {
            Waited::Answered(result) => result,
            Waited::NotSent => Err(Error::connection(format!(
                "The ack was not written: earlier writes held the connection for {} ms (nothing was deleted; the message will be delivered again).",
                bound.as_millis()
            ))),
            Waited::Unanswered => Err(Error::connection(format!(
                "The ack got no answer from the server within {} ms (its delete may have been written).",
                bound.as_millis()
            ))
            .caused_by(Cause::timed_out(format!(
                "no answer within {} ms",
                bound.as_millis()
            )))),
        };
        if written.is_ok() {
            self.counters.acked();
        }
        self.observe(written)
    }

    /// Notes a failed operation as the last error.
    pub(super) fn observe<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(err) = &result {
            self.counters.failed(err);
        }
        result
    }

    /// Deletes the original and inserts the copy atomically; None if the original was gone.
    pub async fn redeliver(&self, id: &str, copy: NewMessage) -> Result<Option<String>> {
        self.guard_not_closed("reject")?;
        self.settled(id);
        let result = self.observe(self.fence.redeliver(&*self.engine, id, copy).await)?;
        self.counters.rejected();
        if result.is_some() {
            self.engine.wake_signal().wake();
        }
        Ok(result)
    }

    /// Write-behind acks recorded and not yet written.
    pub fn stats_pending_acks(&self) -> u64 {
        self.acks_behind.pending()
    }
}
