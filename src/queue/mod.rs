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
pub mod completions;
pub mod engine;
pub mod fence;
pub mod limits;
pub mod outage;
pub mod prefetch;
pub mod send_order;
pub mod stats;
pub mod wake;
pub mod write_behind;

use crate::queue::batch::{Backlog, BatchBound, Coalescer, Waited};
use crate::queue::engine::WaitOutcome;
use crate::queue::engine::{Engine, NewMessage, StoredMessage};
use crate::queue::fence::Fence;
use crate::queue::limits::{
    ACK_BACKLOG, ACK_FLUSH_PATIENCE, MAX_CLAIM_BATCH, MAX_WRITE_BATCH, MIN_RENEW_PERIOD, SEND_BOUND,
};
use crate::queue::outage::Outage;
use crate::queue::prefetch::{Prefetch, PREFETCH_HOLD};
use crate::queue::send_order::{Hold, SendOrder};
use crate::queue::stats::{Counters, Level, Snapshot};
use crate::queue::write_behind::WriteBehind;
use crate::support::error::{Cause, Error, ErrorKind, Result};
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

/// The autoSetup memo: the DDL runs once, only a success is remembered, and a table that
/// vanished under a live instance (a NotFound error) is re-created by the next operation.
struct SetupGate {
    engine: Arc<dyn Engine>,
    auto: bool,
    done: AtomicBool,
    lock: tokio::sync::Mutex<()>,
}

impl SetupGate {
    /// Runs the DDL now, whatever was memoized.
    async fn run(&self) -> Result<()> {
        let _guard = self.lock.lock().await;
        self.engine.setup().await?;
        self.done.store(true, Ordering::Release);
        Ok(())
    }

    async fn ensure(&self) -> Result<()> {
        if !self.auto || self.done.load(Ordering::Acquire) {
            return Ok(());
        }
        let _guard = self.lock.lock().await;
        if !self.done.load(Ordering::Acquire) {
            self.observe(self.engine.setup().await)?;
            self.done.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn observe<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(err) = &result {
            if err.kind == ErrorKind::NotFound {
                self.done.store(false, Ordering::Release);
            }
        }
        result
    }

    /// `op` after the memoized setup, watching its result for a vanished table.
    async fn around<T>(&self, op: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        self.ensure().await?;
        self.observe(op.await)
    }
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
        let setup = Arc::new(SetupGate {
            engine: engine.clone(),
            auto: auto_setup,
            done: AtomicBool::new(false),
            lock: tokio::sync::Mutex::new(()),
        });
        let fence = Arc::new(Fence::default());
        let (ack_engine, ack_fence) = (engine.clone(), fence.clone());
        let send_engine = engine.clone();
        let send_setup = setup.clone();
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
                        fence.delete(&*engine, ids).await?;
                        Ok(vec![(); count])
                    }) as BoxFuture<'static, Result<Vec<()>>>
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
                    let order = flush_order.clone();
                    Box::pin(async move {
                        order.cleared().await;
                        let ids = setup.around(engine.insert(messages)).await?;
                        wake.wake();
                        counters.sent(ids.len());
                        Ok(ids)
                    }) as BoxFuture<'static, Result<Vec<String>>>
                },
            ),
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
        self.setup.done.load(Ordering::Acquire)
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
                ))),
                Waited::Unanswered => Err(engine.unanswered_send()),
            };
            if let Err(err) = &result {
                counters.failed(err);
            }
            result
        })
    }

    /// The next prefetched message, without waiting (the sync fast path).
    pub fn take(self: &Arc<Self>) -> Option<StoredMessage> {
        let mut buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
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

    async fn read_ahead(self: Arc<Self>) {
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
    fn hand_over(&self, rows: Vec<StoredMessage>, requested: u32, took: Option<Duration>) {
        if !rows.is_empty() {
            self.counters.claimed(rows.len(), took);
        }
        self.fence.record(&rows);
        let mut buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
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
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&wait_id);
        outcome
    }

    async fn fill_until(&self, cancel: &CancellationToken) -> Result<bool> {
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
                    let _claiming = self.claim_lock.lock().await;
                    let limit = self.next_batch_size();
                    self.hand_over(rows, limit, None);
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
    async fn ride_out(
        &self,
        outage: &mut Outage,
        err: Error,
        riding: &mut bool,
        cancel: &CancellationToken,
    ) -> Result<()> {
        self.counters.failed(&err);
        let contacted = self.contacted.load(Ordering::Acquire);
        if err.persistent {
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
        outage.ride_out(err, contacted, cancel).await?;
        *riding = true;
        Ok(())
    }

    fn reconnected(&self) {
        self.counters.reconnected();
        self.counters
            .report(Level::Log, "Connection back: consuming again.");
    }

    /// From now on, events are kept for a logger to pull (`take_events`).
    pub fn watch_events(&self) {
        self.counters.watch_events();
    }

    pub fn take_events(&self) -> Vec<crate::queue::stats::Event> {
        self.counters.take_events()
    }

    /// Renews the claim on in-flight rows (their handler is running) and on buffered rows
    /// while the consumer keeps taking them, so neither is taken over as abandoned (a
    /// redelivery timeout, an idle-claim threshold). Buffered rows behind a consumer that
    /// took nothing for `PREFETCH_HOLD` are handed back instead: a stuck handler holds its
    /// own message, never a batch.
    fn spawn_keeper(&self) {
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
                    let mut buffer = buffer.lock().unwrap_or_else(|p| p.into_inner());
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
                        buffer
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .drop_lost(&lost);
                    }
                }
            }
        });
    }

    fn buffer_is_empty(&self) -> bool {
        self.buffer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .rows
            .is_empty()
    }

    /// Sizes the next claim to about `CLAIM_WINDOW` of the consumer's measured pace: a fast
    /// consumer gets big batches (fewer round trips), a slow one small batches (rows are not
    /// held away from other consumers while a slow handler runs).
    fn next_batch_size(&self) -> u32 {
        let (handed, pace, average_bytes) = {
            let buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
            (buffer.handed_at, buffer.pace, buffer.average_bytes)
        };
        let previous = self.batch_size.load(Ordering::Relaxed);
        let next = limits::next_claim_size(previous, pace, handed, average_bytes);
        self.batch_size.store(next, Ordering::Relaxed);
        next
    }

    /// The token of wait `wait_id`. A cancel may arrive before the fill that it targets has
    /// started on the runtime: it then left an already-cancelled token here, which this picks up.
    fn waiter(&self, wait_id: u32) -> CancellationToken {
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
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
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&wait_id);
    }

    /// Gives prefetched rows back to the table (no consumer is left to take them).
    pub async fn release_prefetched(&self) -> Result<()> {
        let _claiming = self.claim_lock.lock().await;
        // No consumer is left: a read-ahead that gets the lock after this must not claim.
        self.reading.store(false, Ordering::Release);
        let rows: Vec<StoredMessage> = {
            let mut buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
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

    fn guard_not_closed(&self, what: &str) -> Result<()> {
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
        self.buffer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .in_flight
            .remove(id);
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
    fn observe<T>(&self, result: Result<T>) -> Result<T> {
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

    /// Counters and buffer figures, read synchronously (`transport.stats()`).
    pub fn stats(&self) -> Snapshot {
        let (buffered, in_flight) = {
            let buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
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
            Error::new(
                err.kind,
                format!(
                    "{unwritten} acknowledgement(s) could not be written before close; those messages will be delivered again after their lease. Last error: {err}"
                ),
            )
        });
        let released = self.release_prefetched().await;
        self.engine.shutdown().await;
        flushed.and(released)
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
