//! A consumer's idle wait: on its queue's wake signal, capped by the next delayed row's due
//! time, by the notify timeout while push wake-ups are live, or else by the table's shared
//! poll; and, where the dialect stores sends claimed, at the queue's hand-off desk.

use super::TableQueue;
use crate::engines::sql::dialect::SqlDialect;
use crate::engines::sql::driver::Driver;
use crate::engines::sql::table_poller::{self, IdleQueue};
use crate::queue::engine::{Engine, StoredMessage, WaitOutcome};
use crate::queue::hand_off::Ticket;
use crate::support::error::Result;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

impl<D: SqlDialect> TableQueue<D> {
    /// Milliseconds until the next unclaimed row is due (≤ 0: due now), `None` if none is.
    async fn next_due_in_ms(&self) -> Result<Option<f64>> {
        let params = self.queue_and_lease();
        self.bounded("claim", None, async {
            D::Db::fetch_wait_ms(self.cx.target.runner(), &self.shared_sql.next_due, &params)
                .await
                .map_err(|e| self.cx.err("claim", e))
        })
        .await
    }

    /// Sleeps until the next delayed message is due, capped by the notify timeout while push
    /// wake-ups are live, else by the poll interval; any wake-up (a NOTIFY, a send in this
    /// process) or `cancel` ends it early.
    pub(super) async fn idle_wait(
        &self,
        seen: u64,
        cancel: &CancellationToken,
    ) -> Result<WaitOutcome> {
        let mut ticket = D::CLAIMS_ON_INSERT.then(|| self.hand_off.wait_here());
        let outcome = self.wait_idle(seen, cancel, &mut ticket).await;
        // Leaving the desk: what a send handed over as the wait ended is taken all the same
        // (a claim's rows, even past a failure or a cancel), never dropped with the ticket.
        match ticket.and_then(Ticket::leave) {
            Some(rows) => Ok(WaitOutcome::Claimed(rows)),
            None => outcome,
        }
    }

    async fn wait_idle(
        &self,
        seen: u64,
        cancel: &CancellationToken,
        ticket: &mut Option<Ticket<Vec<StoredMessage>>>,
    ) -> Result<WaitOutcome> {
        // Rows that a lost claim or a handed send may hide are released by the next claim:
        // while a release is owed (the last one failed), the wait ends soon enough to retry.
        if self.in_doubt.owes_release() {
            return Ok(self
                .wait_on_signal(seen, IN_DOUBT_RETRY, cancel, ticket)
                .await);
        }
        let push = D::FACTS.push_wakeup && self.cx.config.use_notify && D::push_ready(&self.cx);
        let cap = if push {
            self.cx.config.notify_timeout
        } else {
            self.cx.config.poll_interval
        };
        if D::FACTS.shared_poll && !push && cap > MIN_IDLE_WAIT {
            return Ok(self.wait_for_shared_poll(seen, cancel, ticket).await);
        }
        let timeout = if cap <= MIN_IDLE_WAIT {
            cap
        } else {
            // A failed peek just means "nothing scheduled": the cap still bounds the wait. The
            // peek ends with the wait's cancel: an abort or a close() must not leave a native
            // call running on a silent server after it (up to the statement bound), which
            // kept a process that had closed everything from exiting cleanly.
            let peek = tokio::select! {
                peek = self.next_due_in_ms() => peek,
                _ = cancel.cancelled() => return Ok(WaitOutcome::Cancelled),
            };
            match peek {
                Ok(Some(ms)) => crate::support::durations::millis(ms)
                    .min(cap)
                    .max(MIN_IDLE_WAIT),
                _ => cap,
            }
        };
        Ok(self.wait_on_signal(seen, timeout, cancel, ticket).await)
    }

    /// Waits on the queue's signal as [`WakeSignal::wait`] does, and ends with the messages a
    /// send of this process hands over at `ticket` meanwhile (see `crate::queue::hand_off`).
    async fn wait_on_signal(
        &self,
        seen: u64,
        timeout: Duration,
        cancel: &CancellationToken,
        ticket: &mut Option<Ticket<Vec<StoredMessage>>>,
    ) -> WaitOutcome {
        if let Some(at_desk) = ticket.as_mut() {
            tokio::select! {
                biased;
                handed = at_desk.handed() => match handed {
                    Some(rows) => return WaitOutcome::Claimed(rows),
                    // The sender stored nothing claimed: its ordinary insert wakes the queue.
                    None => *ticket = None,
                },
                end = self.wake.wait(seen, timeout, cancel) => return end.into(),
            }
        }
        self.wake.wait(seen, timeout, cancel).await.into()
    }

    /// Waits for a wake-up: a send, release or reject in this process, or the table's shared
    /// poll (rows stored by other processes, delayed rows coming due, lapsed claims). The
    /// consumer runs no statement of its own, and keeps no timer, while that poll answers;
    /// when the poll fails or stops answering, its task wakes every consumer, and each claims
    /// as it would after any wake-up.
    async fn wait_for_shared_poll(
        &self,
        seen: u64,
        cancel: &CancellationToken,
        ticket: &mut Option<Ticket<Vec<StoredMessage>>>,
    ) -> WaitOutcome {
        let interval = self.cx.config.poll_interval;
        D::idles(&self.cx);
        let watch = table_poller::watch(
            &self.cx.target,
            &self.cx.config.table,
            IdleQueue {
                queue: self.cx.config.queue.clone(),
                interval,
                lease: self.claim_lease(),
            },
        );
        // The poll task wakes this wait when its poll goes stale; the cap only covers a task
        // that stopped answering altogether.
        let stale = table_poller::stale_after(interval);
        loop {
            match self
                .wait_on_signal(seen, table_poller::MAX_STALE_AFTER, cancel, ticket)
                .await
            {
                WaitOutcome::TimedOut if watch.fresh(stale) => continue,
                outcome => return outcome,
            }
        }
    }

    /// A row this queue stored becomes due in `delay_ms`: the table's poll wakes the queue's
    /// idle consumers then (a due row is woken for by the send itself).
    pub(super) fn expect_due(&self, delay_ms: f64) {
        let notified = D::FACTS.push_wakeup && self.cx.config.use_notify;
        if D::FACTS.shared_poll && !notified && delay_ms > 0.0 && delay_ms.is_finite() {
            let at = Instant::now() + crate::support::durations::millis(delay_ms);
            self.cx
                .target
                .pollers
                .wake_when_due(&self.cx.config.table, &self.cx.config.queue, at);
        }
    }
}

/// Shortest idle wait: due rows that SKIP LOCKED skipped are re-tried this soon.
const MIN_IDLE_WAIT: Duration = Duration::from_millis(10);

/// How soon an idle consumer retries a release that is owed (see `claim_doubt`).
const IN_DOUBT_RETRY: Duration = Duration::from_millis(500);
