//! Write-behind acks: an ack is recorded at once (a sync call from JavaScript, no thread hop)
//! and its delete is written by a background flusher, together with every ack that arrived
//! meanwhile: one statement/pipeline per flush, so a sequential worker's acks are group
//! committed. `flush()` waits until every recorded ack is written; close(), list(), find() and
//! getMessageCount() call it first. A crash before a flush costs a redelivery (after the
//! redelivery timeout or claim idle time), never a loss; the JavaScript side keeps its event
//! loop alive while acks are pending, so a process that just runs out of work writes them
//! first. `stop()` (close) ends the flusher and says how many were never written.

use crate::queue::engine::Engine;
use crate::queue::fence::Fence;
use crate::queue::stats::{Counters, Level};
use crate::support::error::{Error, ErrorKind, Result};
use crate::support::locks::Locked;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Largest batch one flush writes.
const MAX_FLUSH: usize = 1000;
/// Pause before retrying a failed write, doubling up to `MAX_RETRY_PAUSE`.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(2);

#[derive(Default)]
struct State {
    pending: Vec<String>,
    writing: usize,
    /// Acks recorded and acks written (or found moot) so far: acks are written in the order
    /// they were recorded, so `written >= n` means the first `n` are done.
    recorded: u64,
    written: u64,
    /// The last flush failure, reported to the next `flush()` caller.
    error: Option<Error>,
    /// Since when writes have been failing (None while they succeed).
    failing_since: Option<Instant>,
    /// The failure outlasted the lease and was reported so (once per failing period).
    outlasted_lease: bool,
}

/// What the recorder ([`WriteBehind`]) and its flusher task both hold.
struct Shared {
    engine: Arc<dyn Engine>,
    fence: Arc<Fence>,
    counters: Arc<Counters>,
    state: Mutex<State>,
    work: Notify,
    idle: Notify,
    stop: CancellationToken,
}

pub struct WriteBehind {
    shared: Arc<Shared>,
    flusher: OnceLock<()>,
}

impl WriteBehind {
    pub fn new(engine: Arc<dyn Engine>, fence: Arc<Fence>, counters: Arc<Counters>) -> Self {
        Self {
            shared: Arc::new(Shared {
                engine,
                fence,
                counters,
                state: Mutex::default(),
                work: Notify::new(),
                idle: Notify::new(),
                stop: CancellationToken::new(),
            }),
            flusher: OnceLock::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Acks recorded and not yet written.
    pub fn pending(&self) -> u64 {
        let state = self.lock();
        state.recorded.saturating_sub(state.written)
    }

    /// How long writes have been failing, if they are.
    pub fn failing_for(&self) -> Option<Duration> {
        self.lock().failing_since.map(|since| since.elapsed())
    }

    /// Ends the flusher (close): nothing is written after this. Returns how many recorded
    /// acks were never written.
    pub fn stop(&self) -> u64 {
        self.shared.stop.cancel();
        self.pending()
    }

    /// Records an ack; needs a runtime context (the flusher starts on first use).
    pub fn push(&self, id: String) {
        {
            let mut state = self.lock();
            state.pending.push(id);
            state.recorded += 1;
        }
        self.flusher.get_or_init(|| {
            tokio::spawn(self.shared.clone().run());
        });
        self.shared.work.notify_one();
    }

    /// Waits until every ack recorded so far is written. The flusher retries failed writes by
    /// itself; if they are still failing after `patience`, this reports the last failure (the
    /// acks stay recorded and keep being retried).
    pub async fn flush(&self, patience: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + patience;
        let target = self.lock().recorded;
        loop {
            let idle = self.shared.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            {
                let state = self.lock();
                if state.written >= target {
                    return Ok(());
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(state.error.clone().unwrap_or_else(|| {
                        Error::transport("Acknowledgements could not be written in time.")
                    }));
                }
            }
            self.shared.work.notify_one();
            let _ = tokio::time::timeout_at(deadline, idle).await;
        }
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

/// The flusher task's side.
impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.locked()
    }

    async fn run(self: Arc<Self>) {
        loop {
            tokio::select! {
                _ = self.work.notified() => {}
                _ = self.stop.cancelled() => return,
            }
            self.write_all().await;
            self.idle.notify_waiters();
        }
    }

    /// Writes what is recorded, batch after batch. A failed batch is put back and retried
    /// with a growing pause until it is written (the connection comes back) or the queue
    /// is dropped.
    async fn write_all(&self) {
        let mut pause = RETRY_PAUSE;
        loop {
            let batch: Vec<String> = {
                let mut s = self.lock();
                let take = s.pending.len().min(MAX_FLUSH);
                let batch: Vec<String> = s.pending.drain(..take).collect();
                s.writing = batch.len();
                batch
            };
            if batch.is_empty() {
                return;
            }
            match self.fence.delete(&*self.engine, batch.clone()).await {
                Ok(()) => {
                    let recovered = {
                        let mut s = self.lock();
                        s.writing = 0;
                        s.written += batch.len() as u64;
                        s.failing_since = None;
                        s.outlasted_lease = false;
                        s.error.take().is_some()
                    };
                    if recovered {
                        self.counters
                            .report(Level::Log, "Write-behind acks are written again.");
                    }
                    pause = RETRY_PAUSE;
                    self.idle.notify_waiters();
                }
                // The table (or stream group) is gone, and the rows with it: nothing is left to
                // delete. Retrying by id later could delete a new row that reuses an id.
                Err(error) if error.kind == ErrorKind::NotFound => {
                    {
                        let mut s = self.lock();
                        s.writing = 0;
                        s.written += batch.len() as u64;
                    }
                    self.idle.notify_waiters();
                }
                Err(error) => {
                    let lease = self.engine.claim_lease();
                    let (first, outlasted) = {
                        let mut s = self.lock();
                        s.writing = 0;
                        let rest = std::mem::take(&mut s.pending);
                        s.pending = batch;
                        s.pending.extend(rest);
                        let since = *s.failing_since.get_or_insert_with(Instant::now);
                        let outlasted = !s.outlasted_lease && since.elapsed() >= lease;
                        if outlasted {
                            s.outlasted_lease = true;
                        }
                        let unwritten = s.recorded.saturating_sub(s.written);
                        (
                            s.error.replace(error.clone()).is_none(),
                            outlasted.then(|| (since.elapsed(), unwritten)),
                        )
                    };
                    if first {
                        self.counters.failed(&error);
                        self.counters.report(
                            Level::Error,
                            format!("Write-behind acks could not be written: {error}. Retrying until they are."),
                        );
                    }
                    // Past the lease, the messages behind these acks are claimable again:
                    // they are being delivered a second time.
                    if let Some((failing, unwritten)) = outlasted {
                        self.counters.report(
                            Level::Error,
                            format!(
                                "Write-behind acks have failed for {} s, longer than the lease ({} s): the {unwritten} acknowledged message(s) not yet deleted may be delivered again. Last error: {error}",
                                failing.as_secs(),
                                lease.as_secs()
                            ),
                        );
                    }
                    self.idle.notify_waiters();
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = self.stop.cancelled() => return,
                    }
                    pause = (pause * 2).min(MAX_RETRY_PAUSE);
                }
            }
        }
    }
}
