//! A queue as the JavaScript transport sees it, independent of the engine: the prefetch
//! buffer that JS drains with a sync call, batch claims sized to the consumer, idle waits,
//! coalesced acks and sends, memoized setup, and the close sequence.
//!
//! The folder is the queue layer: the contract every engine implements (`engine`) at its
//! bottom, and above it claims and prefetch, fenced settles and write-behind acks, group
//! commit of sends, completions, outage handling, in-process wake-ups and the counters. It
//! imports `support` and nothing else of the crate: engines are handed to it as
//! `Arc<dyn Engine>`.

pub mod batch;
pub mod by_queue;
mod claims;
pub mod completions;
pub mod engine;
pub mod fence;
pub mod hand_off;
pub mod limits;
pub mod outage;
pub mod prefetch;
pub mod send_order;
mod setup_gate;
pub mod stats;
pub mod wake;
pub mod write_behind;

use crate::queue::batch::{Backlog, BatchBound, Coalescer, Waited};
use crate::queue::engine::{Engine, NewMessage, StoredMessage};
use crate::queue::fence::Fence;
use crate::queue::limits::{
    ACK_BACKLOG, ACK_FLUSH_PATIENCE, MAX_CLAIM_BATCH, MAX_WRITE_BATCH, SEND_BOUND,
};
use crate::queue::prefetch::Prefetch;
use crate::queue::send_order::{Hold, SendOrder};
use crate::queue::setup_gate::SetupGate;
use crate::queue::stats::{Counters, Snapshot};
use crate::queue::write_behind::WriteBehind;
use crate::support::error::{Cause, Error, Outcome, Result};
use crate::support::locks::Locked;
use futures_util::future::BoxFuture;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Queues created and not yet dropped, in this process.
static LIVE_QUEUES: AtomicUsize = AtomicUsize::new(0);

pub fn live_queues() -> usize {
    LIVE_QUEUES.load(Ordering::Relaxed)
}

pub struct Queue {
    engine: Arc<dyn Engine>,
    setup: Arc<SetupGate>,
    /// Claimed rows not yet handed to JavaScript.
    buffer: Arc<Mutex<Prefetch>>,
    keeper: std::sync::OnceLock<()>,
    /// The runtime fills run on, so that sync `take()` calls can start a read-ahead.
    runtime: std::sync::OnceLock<tokio::runtime::Handle>,
    /// A consumer is reading (from its first fill until the prefetched rows are given back).
    reading: AtomicBool,
    /// One claim at a time per queue: concurrent `get()` loops share the buffer.
    claim_lock: tokio::sync::Mutex<()>,
    batch_size: AtomicU32,
    /// A claim or idle wait succeeded once: from then on a consumer rides out connection
    /// failures instead of reporting them (before it, an unreachable server fails fast).
    contacted: AtomicBool,
    closing: CancellationToken,
    /// close() has begun its last step (JavaScript saw every in-flight settle): an ack or a
    /// reject now would be recorded but never written, so it is refused.
    closed: AtomicBool,
    waiters: Mutex<HashMap<u32, CancellationToken>>,
    /// The tokens of this process's claims, which every settle carries.
    fence: Arc<Fence>,
    acks: Coalescer<String, ()>,
    acks_behind: WriteBehind,
    sends: Coalescer<NewMessage, String>,
    /// Batches the direct path sends again go before the sends queued after them.
    send_order: Arc<SendOrder>,
    send_backlog: Backlog,
    counters: Arc<Counters>,
}

impl Queue {
    /// `send_backlog`: how many sends (and bytes of them) may wait to be written before a
    /// send is refused at once.
    pub fn new(
        engine: Arc<dyn Engine>,
        auto_setup: bool,
        first_batch: u32,
        send_backlog: Backlog,
    ) -> Self {
        let setup = Arc::new(SetupGate::new(engine.clone(), auto_setup));
        let fence = Arc::new(Fence::default());
        let (ack_engine, ack_fence) = (engine.clone(), fence.clone());
        let send_engine = engine.clone();
        let send_setup = setup.clone();
        let prepare_setup = setup.clone();
        let send_wake = engine.wake_signal();
        let counters = Arc::new(Counters::default());
        engine.attach_counters(counters.clone());
        let send_counters = counters.clone();
        let send_order = Arc::new(SendOrder::default());
        let flush_order = send_order.clone();
        LIVE_QUEUES.fetch_add(1, Ordering::Relaxed);
        Self {
            acks: Coalescer::new(
                BatchBound::items(MAX_WRITE_BATCH),
                ACK_BACKLOG,
                move |ids: Vec<String>| {
                    let (engine, fence) = (ack_engine.clone(), ack_fence.clone());
                    Box::pin(async move {
                        let count = ids.len();
                        // One statement or script: its acks share one fate.
                        let deleted = fence.delete(&*engine, ids).await;
                        vec![deleted; count]
                    }) as BoxFuture<'static, Vec<Result<()>>>
                },
            ),
            sends: Coalescer::new(
                SEND_BOUND,
                send_backlog,
                move |messages: Vec<NewMessage>| {
                    let engine = send_engine.clone();
                    let setup = send_setup.clone();
                    let wake = send_wake.clone();
                    let counters = send_counters.clone();
                    Box::pin(async move {
                        let answers = engine.insert(messages).await;
                        // A table that vanished is re-created by the next operation.
                        for err in answers.iter().filter_map(|answer| answer.as_ref().err()) {
                            setup.note(err);
                        }
                        let stored = answers.iter().filter(|a| a.is_ok()).count();
                        if stored > 0 {
                            wake.wake();
                            counters.sent(stored);
                        }
                        answers
                    }) as BoxFuture<'static, Vec<Result<String>>>
                },
            )
            // Earlier re-sent batches and the first-use setup come before a batch is taken:
            // until then its sends were not sent and can still be withdrawn.
            .prepared_by(move || {
                let order = flush_order.clone();
                let setup = prepare_setup.clone();
                Box::pin(async move {
                    order.cleared().await;
                    setup.ensure().await
                }) as BoxFuture<'static, Result<()>>
            }),
            acks_behind: WriteBehind::new(engine.clone(), fence.clone(), counters.clone()),
            send_order,
            send_backlog,
            fence,
            engine,
            setup,
            buffer: Arc::default(),
            keeper: std::sync::OnceLock::new(),
            runtime: std::sync::OnceLock::new(),
            reading: AtomicBool::new(false),
            claim_lock: tokio::sync::Mutex::new(()),
            batch_size: AtomicU32::new(first_batch.clamp(1, MAX_CLAIM_BATCH)),
            contacted: AtomicBool::new(false),
            closing: CancellationToken::new(),
            closed: AtomicBool::new(false),
            waiters: Mutex::default(),
            counters,
        }
    }

    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    /// Refuses a send at once as `send` would: the transport is closing, or the storage is
    /// known to refuse the message.
    pub fn check_send(&self, message: &NewMessage) -> Result<()> {
        self.guard_open("send")?;
        self.engine.check_message(message)
    }

    /// Whether the memoized setup has run (sends stored another way may skip it then).
    pub fn setup_done(&self) -> bool {
        self.setup.is_done()
    }

    /// Counts sends stored another way (`direct_sends`) and wakes this process's idle
    /// consumers, as a send through `send` does.
    pub fn note_sent(&self, count: usize) {
        self.counters.sent(count);
        self.engine.wake_signal().wake();
    }

    pub fn note_send_failed(&self, err: &Error) {
        self.counters.failed(err);
    }

    /// Holds back the sends queued from now on until the hold is dropped (see `send_order`).
    pub fn hold_sends(&self) -> Hold {
        self.send_order.hold()
    }

    /// How many sends (and bytes of them) may wait to be written.
    pub fn send_backlog(&self) -> Backlog {
        self.send_backlog
    }

    pub fn send_bound(&self) -> Duration {
        self.engine.send_bound()
    }

    pub fn unanswered_send(&self) -> Error {
        self.engine.unanswered_send()
    }

    fn guard_open(&self, what: &str) -> Result<()> {
        if self.closing.is_cancelled() {
            Err(Error::closed(format!(
                "Cannot {what} on a transport that is closing or closed."
            )))
        } else {
            Ok(())
        }
    }

    /// Runs the DDL now, whatever was memoized.
    pub async fn setup(&self) -> Result<()> {
        self.setup.run().await
    }

    /// Queues a send now, so concurrent sends are stored in the order they were made, and
    /// returns the wait for its id (sends in flight together share one INSERT).
    pub fn send(
        &self,
        message: NewMessage,
    ) -> Result<impl std::future::Future<Output = Result<String>> + Send + 'static> {
        self.guard_open("send")?;
        self.engine.check_message(&message)?;
        let pending = self.sends.enqueue(message)?;
        let (engine, counters) = (self.engine.clone(), self.counters.clone());
        Ok(async move {
            let bound = engine.send_bound();
            let result = match pending.within(bound).await {
                Waited::Answered(result) => result,
                // Still queued behind writes that got no answer: withdrawn, so never written.
                Waited::NotSent => Err(Error::connection(format!(
                    "The send was not stored: earlier writes held the connection for {} ms, and this message was withdrawn before it was sent.",
                    bound.as_millis()
                ))
                .with_outcome(Outcome::NotApplied)),
                Waited::Unanswered => Err(engine.unanswered_send()),
            };
            if let Err(err) = &result {
                counters.failed(err);
            }
            result
        })
    }

    /// From now on, events are kept for a logger to pull (`take_events`).
    pub fn watch_events(&self) {
        self.counters.watch_events();
    }

    pub fn take_events(&self) -> Vec<crate::queue::stats::Event> {
        self.counters.take_events()
    }

    /// Counters and buffer figures, read synchronously (`transport.stats()`).
    pub fn stats(&self) -> Snapshot {
        let (buffered, in_flight) = {
            let buffer = self.buffer.locked();
            (buffer.rows.len() as u64, buffer.in_flight.len() as u64)
        };
        let counters = self.counters.snapshot();
        Snapshot {
            buffered,
            in_flight,
            // The same claims in two books (the fence's tokens, an engine's own): the larger.
            tracked_ids: counters.tracked_ids.max(self.fence.held_claims() as u64),
            pending_acks: self.acks_behind.pending(),
            ack_write_failing_ms: self
                .acks_behind
                .failing_for()
                .map(|d| d.as_secs_f64() * 1000.0),
            stale_settles: self.fence.stale_settles(),
            shared_polls: self.engine.shared_polls(),
            ..counters
        }
    }

    pub async fn list(&self, limit: u32) -> Result<Vec<StoredMessage>> {
        self.flush_acks().await?;
        self.setup.around(self.engine.list(limit)).await
    }

    pub async fn find(&self, id: &str) -> Result<Option<StoredMessage>> {
        self.flush_acks().await?;
        self.setup.around(self.engine.find(id.to_owned())).await
    }

    pub async fn count(&self) -> Result<i64> {
        self.flush_acks().await?;
        self.setup.around(self.engine.count()).await
    }

    /// A health probe: the queue's message count read within `bound` (no ack flush first, so
    /// a failing ack write cannot hold it), and how long it took.
    pub async fn health(&self, bound: Duration) -> Result<(i64, Duration)> {
        let started = Instant::now();
        match tokio::time::timeout(bound, self.setup.around(self.engine.count())).await {
            Ok(Ok(count)) => Ok((count, started.elapsed())),
            Ok(Err(err)) => self.observe(Err(err)),
            Err(_) => {
                let detail = format!("No answer within {} ms.", bound.as_millis());
                self.observe(Err(
                    Error::connection(detail.clone()).caused_by(Cause::timed_out(detail))
                ))
            }
        }
    }

    /// First step of close: no new claims or sends; every idle wait returns now.
    pub fn begin_close(&self) {
        self.closing.cancel();
    }

    /// Last step of close (after JavaScript saw every in-flight settle): give back prefetched
    /// rows, then let go of the shared pool.
    pub async fn close(&self) -> Result<()> {
        self.begin_close();
        self.closed.store(true, Ordering::Release);
        let flushed = self.flush_acks().await;
        // Nothing is written after close: a flusher left retrying would hold the queue (and
        // the pool it left) for ever.
        let unwritten = self.acks_behind.stop();
        let flushed = flushed.map_err(|err| {
            if unwritten == 0 {
                return err;
            }
            // The unwritten acks were tried and may have been written: whatever the last
            // error knew of its own write, theirs is unknown.
            Error::new(
                err.kind,
                format!(
                    "{unwritten} acknowledgement(s) could not be written before close; those messages will be delivered again after their lease. Last error: {err}"
                ),
            )
            .with_outcome(Outcome::Unknown)
        });
        let released = self.release_prefetched().await;
        self.engine.shutdown().await;
        flushed.and(released)
    }
}

// The settling side: acks (write-behind, or awaited group commit), the end of a delivery's
// claim without a write, and redelivery of a rejected message as a copy.
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
        self.stop_renewing(&id);
        self.acks_behind.push(id);
        self.counters.acked();
        Ok(())
    }

    /// Stops renewing the claim of a delivered row: its handler is done (acked, rejected, or
    /// given up by JavaScript without a write).
    pub fn stop_renewing(&self, id: &str) {
        self.buffer.locked().in_flight.remove(id);
    }

    /// A delivered row JavaScript gave up without a write: no longer renewed, its claim
    /// lapses at the lease.
    pub fn give_up(&self, id: &str) {
        self.stop_renewing(id);
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
        self.stop_renewing(id);
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
        self.stop_renewing(id);
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

impl Drop for Queue {
    // A transport dropped without close(): stop its background work all the same.
    fn drop(&mut self) {
        self.closing.cancel();
        self.acks_behind.stop();
        LIVE_QUEUES.fetch_sub(1, Ordering::Relaxed);
    }
}
