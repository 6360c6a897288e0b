//! A queue as the JavaScript transport sees it, independent of the engine: the prefetch
//! buffer that JS drains with a sync call, batch claims sized to the consumer, idle waits,
//! coalesced acks and sends, memoized setup, and the close sequence.

use crate::batch::Coalescer;
use crate::error::{Error, ErrorKind, Result};
use crate::sql::{NewMessage, SqlEngine, StoredMessage};
use crate::wake::WaitOutcome;
use futures_util::future::BoxFuture;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Largest claim; also bounds how many rows one consumer can hold before handling them.
pub const MAX_CLAIM_BATCH: u32 = 256;
const FIRST_CLAIM_BATCH: u32 = 16;
/// A claim aims to hold about this much of the consumer's work (see `next_batch_size`).
const CLAIM_WINDOW: Duration = Duration::from_millis(100);
/// Largest batch one ack or send statement carries.
const MAX_WRITE_BATCH: usize = 1000;
/// Shortest idle wait: due rows that SKIP LOCKED skipped are re-tried this soon.
const MIN_IDLE_WAIT: Duration = Duration::from_millis(10);

/// Timing options of the idle wait.
#[derive(Debug, Clone, Copy)]
pub struct WaitConfig {
    pub poll_interval: Duration,
    pub notify_timeout: Duration,
}

pub struct Queue {
    engine: Arc<dyn SqlEngine>,
    waits: WaitConfig,
    setup: Arc<SetupGate>,
    /// Claimed rows not yet handed to JavaScript.
    buffer: Mutex<Prefetch>,
    /// One claim at a time per queue: concurrent `get()` loops share the buffer.
    claim_lock: tokio::sync::Mutex<()>,
    batch_size: AtomicU32,
    closing: CancellationToken,
    waiters: Mutex<HashMap<u32, CancellationToken>>,
    acks: Coalescer<i64, ()>,
    sends: Coalescer<NewMessage, String>,
}

#[derive(Default)]
struct Prefetch {
    rows: VecDeque<StoredMessage>,
    /// When the current batch was handed over and how big it was, to size the next one.
    handed_at: Option<(Instant, usize)>,
}

/// The autoSetup memo: the DDL runs once, only a success is remembered, and a table that
/// vanished under a live instance (a NotFound error) is re-created by the next operation.
struct SetupGate {
    engine: Arc<dyn SqlEngine>,
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
    pub fn new(engine: Arc<dyn SqlEngine>, waits: WaitConfig, auto_setup: bool) -> Self {
        let setup = Arc::new(SetupGate {
            engine: engine.clone(),
            auto: auto_setup,
            done: AtomicBool::new(false),
            lock: tokio::sync::Mutex::new(()),
        });
        let ack_engine = engine.clone();
        let send_engine = engine.clone();
        let send_setup = setup.clone();
        let send_wake = engine.wake_signal();
        Self {
            acks: Coalescer::new(MAX_WRITE_BATCH, move |ids: Vec<i64>| {
                let engine = ack_engine.clone();
                Box::pin(async move {
                    let count = ids.len();
                    engine.delete(ids).await?;
                    Ok(vec![(); count])
                }) as BoxFuture<'static, Result<Vec<()>>>
            }),
            sends: Coalescer::new(MAX_WRITE_BATCH, move |messages: Vec<NewMessage>| {
                let engine = send_engine.clone();
                let setup = send_setup.clone();
                let wake = send_wake.clone();
                Box::pin(async move {
                    let ids = setup.around(engine.insert(messages)).await?;
                    wake.wake();
                    Ok(ids)
                }) as BoxFuture<'static, Result<Vec<String>>>
            }),
            engine,
            waits,
            setup,
            buffer: Mutex::default(),
            claim_lock: tokio::sync::Mutex::new(()),
            batch_size: AtomicU32::new(FIRST_CLAIM_BATCH),
            closing: CancellationToken::new(),
            waiters: Mutex::default(),
        }
    }

    fn guard_open(&self, what: &str) -> Result<()> {
        if self.closing.is_cancelled() {
            Err(Error::closed(format!(
                "Cannot {what} on a SQL transport that is closing or closed."
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
        self.sends.enqueue(message)
    }

    /// The next prefetched message, without waiting (the sync fast path).
    pub fn take(&self) -> Option<StoredMessage> {
        let mut buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
        buffer.rows.pop_front()
    }

    /// Waits until the buffer holds at least one message (true), or the wait is cancelled or
    /// the queue closes (false). Claims are never cancelled half-way: rows a claim returns
    /// land in the buffer, and `release_prefetched` gives them back.
    pub async fn fill(&self, wait_id: u32) -> Result<bool> {
        let cancel = self.register_waiter(wait_id);
        let outcome = self.fill_until(&cancel).await;
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&wait_id);
        outcome
    }

    async fn fill_until(&self, cancel: &CancellationToken) -> Result<bool> {
        let signal = self.engine.wake_signal();
        loop {
            if cancel.is_cancelled() {
                return Ok(false);
            }
            let seen = signal.seq();
            {
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
                let rows = self.setup.around(self.engine.claim(limit)).await?;
                if !rows.is_empty() {
                    let mut buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
                    buffer.handed_at = Some((Instant::now(), rows.len()));
                    buffer.rows.extend(rows);
                    return Ok(true);
                }
            }
            let timeout = self.idle_wait().await;
            if signal.wait(seen, timeout, cancel).await == WaitOutcome::Cancelled {
                return Ok(false);
            }
        }
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
        let handed = self
            .buffer
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .handed_at;
        let previous = self.batch_size.load(Ordering::Relaxed);
        let next = match handed {
            None => previous,
            Some((at, count)) => {
                let per_message = at.elapsed().as_secs_f64() / count.max(1) as f64;
                let fit = if per_message <= 0.0 {
                    MAX_CLAIM_BATCH as f64
                } else {
                    CLAIM_WINDOW.as_secs_f64() / per_message
                };
                // Grow at most 4x per claim so a burst of cheap messages does not overshoot.
                (fit.min(previous as f64 * 4.0)).clamp(1.0, MAX_CLAIM_BATCH as f64) as u32
            }
        };
        self.batch_size.store(next, Ordering::Relaxed);
        next
    }

    /// How long an idle consumer may sleep: until the next delayed message is due, capped by
    /// the notify timeout while push wake-ups are live, else by the poll interval.
    async fn idle_wait(&self) -> Duration {
        let cap = if self.engine.capabilities().push_wakeup && self.engine.push_ready().await {
            self.waits.notify_timeout
        } else {
            self.waits.poll_interval
        };
        if cap <= MIN_IDLE_WAIT {
            return cap;
        }
        // A failed peek just means "nothing scheduled": the cap still bounds the wait.
        match self.engine.next_due_in_ms().await {
            Ok(Some(ms)) => Duration::from_secs_f64((ms.max(0.0) / 1000.0).min(cap.as_secs_f64()))
                .max(MIN_IDLE_WAIT),
            _ => cap,
        }
    }

    /// The token of wait `wait_id`. A cancel may arrive before the fill that it targets has
    /// started on the runtime: it then left an already-cancelled token here, which this picks up.
    fn register_waiter(&self, wait_id: u32) -> CancellationToken {
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        waiters
            .entry(wait_id)
            .or_insert_with(|| self.closing.child_token())
            .clone()
    }

    /// Ends the `fill` of `wait_id` (the consumer's signal aborted), or the next one if none
    /// is running yet.
    pub fn cancel_wait(&self, wait_id: u32) {
        let mut waiters = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        waiters
            .entry(wait_id)
            .or_insert_with(|| self.closing.child_token())
            .cancel();
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
        let rows: Vec<StoredMessage> = {
            let mut buffer = self.buffer.lock().unwrap_or_else(|p| p.into_inner());
            buffer.handed_at = None;
            buffer.rows.drain(..).collect()
        };
        if rows.is_empty() {
            return Ok(());
        }
        let ids = rows
            .iter()
            .filter_map(|r| r.id.parse::<i64>().ok())
            .collect();
        self.engine.release(ids).await?;
        self.engine.wake_signal().wake();
        Ok(())
    }

    pub async fn ack(&self, id: &str) -> Result<()> {
        // Ids that are not ours cannot be in the table: deleting them is a no-op.
        let Ok(id) = id.parse::<i64>() else {
            return Ok(());
        };
        self.acks.submit(id).await
    }

    /// Deletes the original and inserts the copy atomically; None if the original was gone.
    pub async fn redeliver(&self, id: &str, copy: NewMessage) -> Result<Option<String>> {
        let Ok(id) = id.parse::<i64>() else {
            return Ok(None);
        };
        let result = self.engine.redeliver(id, copy).await?;
        if result.is_some() {
            self.engine.wake_signal().wake();
        }
        Ok(result)
    }

    pub async fn list(&self, limit: u32) -> Result<Vec<StoredMessage>> {
        self.setup.around(self.engine.list(limit)).await
    }

    pub async fn find(&self, id: &str) -> Result<Option<StoredMessage>> {
        if !crate::ident::is_decimal_id(id) {
            return Ok(None);
        }
        let Ok(id) = id.parse::<i64>() else {
            return Ok(None);
        };
        self.setup.around(self.engine.find(id)).await
    }

    pub async fn count(&self) -> Result<i64> {
        self.setup.around(self.engine.count()).await
    }

    /// First step of close: no new claims or sends; every idle wait returns now.
    pub fn begin_close(&self) {
        self.closing.cancel();
    }

    /// Last step of close (after JavaScript saw every in-flight settle): give back prefetched
    /// rows, then let go of the shared pool.
    pub async fn close(&self) -> Result<()> {
        self.begin_close();
        let released = self.release_prefetched().await;
        self.engine.shutdown().await;
        released
    }
}
