//! The consuming side of a queue: taking the next buffered row, filling the buffer with a
//! claim sized to the consumer (or waiting while the queue is idle, riding out outages),
//! reading ahead, the keeper that renews claims and hands back what is not handled in time,
//! and the end of a wait or of the prefetch.

use super::Queue;
use crate::queue::engine::{StoredMessage, WaitOutcome};
use crate::queue::limits;
use crate::queue::limits::MIN_RENEW_PERIOD;
use crate::queue::outage::Outage;
use crate::queue::prefetch::PREFETCH_HOLD;
use crate::queue::stats::Level;
use crate::support::error::{Error, ErrorKind, Result};
use crate::support::locks::Locked;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

impl Queue {
    /// The next prefetched message, without waiting (the sync fast path).
    pub fn take(self: &Arc<Self>) -> Option<StoredMessage> {
        let mut buffer = self.buffer.locked();
        let next = buffer.take();
        // Claim the next batch while JavaScript handles this one (read-ahead).
        if next.is_some() && buffer.read_ahead_due() {
            buffer.full = false;
            if let Some(runtime) = self.runtime.get() {
                runtime.spawn(self.clone().read_ahead());
            }
        }
        next
    }

    pub(super) async fn read_ahead(self: Arc<Self>) {
        let Ok(_claiming) = self.claim_lock.try_lock() else {
            return;
        };
        if !self.reading.load(Ordering::Acquire) || self.closing.is_cancelled() {
            return;
        }
        let limit = self.next_batch_size();
        let started = Instant::now();
        // A failure is left for the next fill to meet and report.
        if let Ok(rows) = self.setup.around(self.engine.claim(limit)).await {
            if rows.is_empty() {
                self.counters.claimed_nothing();
            }
            self.hand_over(rows, limit, Some(started.elapsed()));
        }
    }

    /// Puts freshly claimed rows in the buffer and notes the batch for sizing and renewal;
    /// `took`: how long the claim statement ran (None for rows an idle wait claimed).
    pub(super) fn hand_over(
        &self,
        rows: Vec<StoredMessage>,
        requested: u32,
        took: Option<Duration>,
    ) {
        if !rows.is_empty() {
            self.counters.claimed(rows.len(), took);
        }
        self.fence.record(&rows);
        let mut buffer = self.buffer.locked();
        if took.is_some() {
            buffer.claim_took = took;
        }
        buffer.handed_at = Some((Instant::now(), buffer.rows.len() + rows.len()));
        // The renewal clock is the oldest claim held: rows still buffered or in a handler
        // keep theirs, or a consumer that claims more often than the renewal period would
        // never renew a slow handler's message.
        if buffer.rows.is_empty() && buffer.in_flight.is_empty() {
            buffer.renewed_at = Some(Instant::now());
        }
        buffer.last_taken = Some(Instant::now());
        buffer.requested = requested as usize;
        buffer.full = rows.len() >= requested as usize && requested > 1;
        let bytes: usize = rows.iter().map(|r| r.body.len() + r.headers.len()).sum();
        buffer.average_bytes = bytes / rows.len().max(1);
        buffer.rows.extend(rows);
    }

    /// Waits until the buffer holds at least one message (true), or the wait is cancelled or
    /// the queue closes (false). Claims are never cancelled half-way: rows a claim returns
    /// land in the buffer, and `release_prefetched` gives them back.
    pub async fn fill(&self, wait_id: u32) -> Result<bool> {
        let cancel = self.waiter(wait_id);
        let outcome = self.fill_until(&cancel).await;
        self.waiters.locked().remove(&wait_id);
        outcome
    }

    pub(super) async fn fill_until(&self, cancel: &CancellationToken) -> Result<bool> {
        self.keeper.get_or_init(|| self.spawn_keeper());
        self.runtime.get_or_init(tokio::runtime::Handle::current);
        self.reading.store(true, Ordering::Release);
        let signal = self.engine.wake_signal();
        let mut outage = Outage::default();
        // A failure was ridden out: the next success is a reconnect.
        let mut riding = false;
        loop {
            if cancel.is_cancelled() {
                return Ok(false);
            }
            let seen = signal.seq();
            let claimed = {
                let _claiming = tokio::select! {
                    guard = self.claim_lock.lock() => guard,
                    _ = cancel.cancelled() => return Ok(false),
                };
                if !self.buffer_is_empty() {
                    return Ok(true);
                }
                if cancel.is_cancelled() {
                    return Ok(false);
                }
                let limit = self.next_batch_size();
                let started = Instant::now();
                match self.setup.around(self.engine.claim(limit)).await {
                    Ok(rows) if !rows.is_empty() => {
                        self.hand_over(rows, limit, Some(started.elapsed()));
                        self.contacted.store(true, Ordering::Release);
                        if riding {
                            self.reconnected();
                        }
                        return Ok(true);
                    }
                    Ok(_) => {
                        // Answered: the server was reached, so a failure from now on is an
                        // outage to ride out, not a server that was never there.
                        self.contacted.store(true, Ordering::Release);
                        self.counters.claimed_nothing();
                        Ok(())
                    }
                    Err(err) => Err(err),
                }
            };
            if let Err(err) = claimed {
                self.ride_out(&mut outage, err, &mut riding, cancel).await?;
                continue;
            }
            if std::mem::take(&mut riding) {
                // The claim was answered: the server is back. Said now, not after the idle
                // wait that follows, which lasts while nothing comes (a shared poll's does).
                self.contacted.store(true, Ordering::Release);
                self.reconnected();
                outage = Outage::default();
            }
            match self.setup.around(self.engine.idle(seen, cancel)).await {
                Ok(WaitOutcome::Cancelled) => return Ok(false),
                // Buffered like a claim's rows, even when `cancel` fired meanwhile (the loop
                // then returns false): `release_prefetched` gives them back.
                Ok(WaitOutcome::Claimed(rows)) if !rows.is_empty() => {
                    {
                        let _claiming = self.claim_lock.lock().await;
                        let limit = self.next_batch_size();
                        self.hand_over(rows, limit, None);
                    }
                    // The wait was ended by an abort or close() whose release of the buffer
                    // may have run already (nobody reads it any more): these rows are given
                    // back now, not left in a buffer nobody reads.
                    let unread = self.closed.load(Ordering::Acquire)
                        || !self.reading.load(Ordering::Acquire);
                    if cancel.is_cancelled() && unread {
                        let _ = self.release_prefetched().await;
                    }
                }
                Ok(_) => {}
                Err(err) => {
                    self.ride_out(&mut outage, err, &mut riding, cancel).await?;
                    continue;
                }
            }
            self.contacted.store(true, Ordering::Release);
            if std::mem::take(&mut riding) {
                self.reconnected();
            }
            outage = Outage::default();
        }
    }

    /// A consumer's failed claim or wait: counted, reported to a logger when a run of
    /// failures starts (and a refusal every time: credentials or a database gone), then waited
    /// out or surfaced (`Outage`).
    pub(super) async fn ride_out(
        &self,
        outage: &mut Outage,
        err: Error,
        riding: &mut bool,
        cancel: &CancellationToken,
    ) -> Result<()> {
        self.counters.failed(&err);
        let contacted = self.contacted.load(Ordering::Acquire);
        let recreates = self.setup.is_auto();
        if err.kind == ErrorKind::NotFound && recreates && contacted {
            self.counters.report(
                Level::Warn,
                format!("{err}: gone under a live consumer (a server restarted empty, a table, stream or group removed); autoSetup re-creates it and get() goes on."),
            );
        } else if err.persistent {
            self.counters.report(
                Level::Error,
                format!("The server refused the consumer: {err}"),
            );
        } else if !*riding && contacted && err.kind == ErrorKind::Connection {
            self.counters.report(
                Level::Warn,
                format!("Connection lost: {err}. get() keeps trying."),
            );
        }
        outage.ride_out(err, contacted, recreates, cancel).await?;
        *riding = true;
        Ok(())
    }

    pub(super) fn reconnected(&self) {
        self.counters.reconnected();
        self.counters
            .report(Level::Log, "Connection back: consuming again.");
    }

    /// Renews the claim on in-flight rows (their handler is running) and on buffered rows
    /// while the consumer keeps taking them, so neither is taken over as abandoned (a
    /// redelivery timeout, an idle-claim threshold). Buffered rows behind a consumer that
    /// took nothing for `PREFETCH_HOLD` are handed back instead: a stuck handler holds its
    /// own message, never a batch.
    pub(super) fn spawn_keeper(&self) {
        let lease = self.engine.claim_lease();
        let period = (lease / 3).max(MIN_RENEW_PERIOD);
        let tick = period.min(PREFETCH_HOLD / 2).max(MIN_RENEW_PERIOD);
        let (engine, buffer, closing, fence) = (
            self.engine.clone(),
            self.buffer.clone(),
            self.closing.clone(),
            self.fence.clone(),
        );
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = closing.cancelled() => return,
                    _ = tokio::time::sleep(tick) => {}
                }
                let (hand_back, renew) = {
                    let mut buffer = buffer.locked();
                    buffer.keeper_round(period)
                };
                // Best effort both: a failed release or renewal means the rows come back at
                // their lease, never that they are lost.
                if !hand_back.is_empty() && fence.release(&*engine, hand_back).await.is_ok() {
                    engine.wake_signal().wake();
                }
                if !renew.is_empty() {
                    if let Ok(lost) = fence.renew(&*engine, renew).await {
                        // Taken over by another consumer: a buffered one is not handed out;
                        // an in-flight one is no longer renewed (its settle will be stale).
                        buffer.locked().drop_lost(&lost);
                    }
                }
            }
        });
    }

    pub(super) fn buffer_is_empty(&self) -> bool {
        self.buffer.locked().rows.is_empty()
    }

    /// Sizes the next claim to about `CLAIM_WINDOW` of the consumer's measured pace: a fast
    /// consumer gets big batches (fewer round trips), a slow one small batches (rows are not
    /// held away from other consumers while a slow handler runs).
    pub(super) fn next_batch_size(&self) -> u32 {
        let (handed, pace, average_bytes) = {
            let buffer = self.buffer.locked();
            (buffer.handed_at, buffer.pace, buffer.average_bytes)
        };
        let previous = self.batch_size.load(Ordering::Relaxed);
        let next = limits::next_claim_size(previous, pace, handed, average_bytes);
        self.batch_size.store(next, Ordering::Relaxed);
        next
    }

    /// The token of wait `wait_id`. A cancel may arrive before the fill that it targets has
    /// started on the runtime: it then left an already-cancelled token here, which this picks up.
    pub(super) fn waiter(&self, wait_id: u32) -> CancellationToken {
        let mut waiters = self.waiters.locked();
        waiters
            .entry(wait_id)
            .or_insert_with(|| self.closing.child_token())
            .clone()
    }

    /// Ends the `fill` of `wait_id` (the consumer's signal aborted), or the next one if none
    /// is running yet.
    pub fn cancel_wait(&self, wait_id: u32) {
        self.waiter(wait_id).cancel();
    }

    /// Forgets `wait_id` once its consumer is gone (drops a cancel that no fill consumed).
    pub fn forget_wait(&self, wait_id: u32) {
        self.waiters.locked().remove(&wait_id);
    }

    /// Gives prefetched rows back to the table (no consumer is left to take them).
    pub async fn release_prefetched(&self) -> Result<()> {
        let _claiming = self.claim_lock.lock().await;
        // No consumer is left: a read-ahead that gets the lock after this must not claim.
        self.reading.store(false, Ordering::Release);
        let rows: Vec<StoredMessage> = {
            let mut buffer = self.buffer.locked();
            buffer.handed_at = None;
            buffer.full = false;
            buffer.rows.drain(..).collect()
        };
        if rows.is_empty() {
            return Ok(());
        }
        self.fence
            .release(&*self.engine, rows.into_iter().map(|r| r.id).collect())
            .await?;
        self.engine.wake_signal().wake();
        Ok(())
    }
}
