//! `NativeQueue`, the one exported class: a queue (a table's queue, or a stream) with its
//! sends, claims and settles, each method a conversion around a call into `queue::Queue` (or,
//! for a send the host's event loop can serve, `direct::sends`).

use super::loop_hold::LoopHold;
use super::message::JsMessage;
use super::options::{self, millis, RedisQueueOptions, SqlQueueOptions};
use super::settled_sends::{settled_sends, SettledSends, SettledTsfn};
use super::text::JsText;
use super::values::{NativeEvent, NativeHealth, NativeMessage, NativeStats};
use crate::direct::loop_callback;
use crate::direct::sends::DirectSends;
use crate::direct::settle_report::{LoopReport, Report, ToRuntime};
use crate::queue::completions;
use crate::queue::engine::NewMessage;
use crate::queue::Queue;
use crate::support::error::Error;
use crate::support::locks::Locked;
use napi::bindgen_prelude::within_runtime_if_available;
use napi::bindgen_prelude::{JsValue, JsValuesTupleIntoVec};
use napi::Env;
use std::sync::Arc;

/// Where a queue's sends settle, once `onSendsSettled` set it.
struct SendReporter {
    /// Queues a send on the runtime's path (group commit, settled through `completions`).
    to_runtime: ToRuntime,
    /// Weak (it keeps no event loop alive) except while JavaScript waits on a send.
    tsfn: Arc<std::sync::Mutex<SettledTsfn>>,
    /// Holds `tsfn` while JavaScript waits on a send.
    hold: Arc<LoopHold>,
}

/// One queue (a table's queue, or a stream), bound to the process-wide connections of its DSN.
#[napi]
pub struct NativeQueue {
    queue: Arc<Queue>,
    /// Where sends settle (see `completions`), from the first `onSendsSettled` call.
    sends: std::sync::Mutex<Option<SendReporter>>,
    /// Sends served on the JavaScript thread, where the engine has that path.
    direct: std::sync::Mutex<Option<DirectSends>>,
    /// Sends on the runtime's path not settled yet (the direct path waits for none).
    on_runtime_path: Arc<std::sync::atomic::AtomicUsize>,
}

impl NativeQueue {
    fn over(queue: Queue) -> Self {
        Self {
            queue: Arc::new(queue),
            sends: std::sync::Mutex::new(None),
            direct: std::sync::Mutex::new(None),
            on_runtime_path: Arc::default(),
        }
    }
}

#[napi]
impl NativeQueue {
    /// A SQL queue: validates options and binds to the shared pool; opens no connection.
    #[napi(factory, catch_unwind)]
    pub fn sql(options: SqlQueueOptions) -> napi::Result<Self> {
        Ok(Self::over(options::sql_queue(options)?))
    }

    /// A Redis Streams queue: validates options and prepares the connection target;
    /// opens no connection.
    #[napi(factory, catch_unwind)]
    pub fn redis(options: RedisQueueOptions) -> napi::Result<Self> {
        Ok(Self::over(options::redis_queue(options)?))
    }

    /// Creates the table and index if missing (always runs; refreshes the autoSetup memo).
    #[napi]
    pub async fn setup(&self) -> napi::Result<()> {
        Ok(self.queue.setup().await?)
    }

    /// Sets where sends settle: `callback` receives every batch of settled sends (once;
    /// later calls are ignored). Call before the first `sendQueued`. `directSends` says
    /// whether sends may be served on this thread's event loop: only where the host is
    /// Node.js itself (other runtimes export libuv's names as stubs that crash).
    #[napi(
        catch_unwind,
        ts_args_type = "callback: (seqs: number[], ids: string, errors: Array<string | null> | null) => void, directSends?: boolean | undefined | null"
    )]
    pub fn on_sends_settled(
        &self,
        env: &Env,
        callback: napi::bindgen_prelude::Function<'_, SettledSends, ()>,
        direct_sends: Option<bool>,
    ) -> napi::Result<()> {
        let mut sends = self.sends.locked();
        if sends.is_some() {
            return Ok(());
        }
        let hold = Arc::new(LoopHold::default());
        let reported = hold.clone();
        let tsfn: SettledTsfn = callback
            .build_threadsafe_function::<Vec<completions::Settled<String>>>()
            .callee_handled::<false>()
            .weak::<true>()
            .build_callback(move |ctx| {
                reported.reported(&ctx.env, ctx.value.len());
                Ok(settled_sends(ctx.value))
            })?;
        let tsfn = Arc::new(std::sync::Mutex::new(tsfn));
        hold.bind(Arc::downgrade(&tsfn));
        let reporter = tsfn.clone();
        let report: Report = Arc::new(move |batch| {
            // Fails only once the environment is tearing down: nobody is waiting.
            let reporter = reporter.locked();
            let _ = reporter.call(
                batch,
                napi::threadsafe_function::ThreadsafeFunctionCallMode::NonBlocking,
            );
        });
        let to_js = report.clone();
        let completions = within_runtime_if_available(|| {
            completions::Completions::start(move |batch| to_js(batch))
        });
        let (queue, on_runtime_path) = (self.queue.clone(), self.on_runtime_path.clone());
        let to_runtime: ToRuntime = Arc::new(move |seq, message| {
            // Queued here, on the calling thread: the order of calls is the order of the rows.
            let stored = within_runtime_if_available(|| queue.send(message))?;
            let on_runtime_path = on_runtime_path.clone();
            on_runtime_path.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            completions.push(seq, async move {
                let result = stored.await;
                on_runtime_path.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                result
            })
        });
        *sends = Some(SendReporter {
            to_runtime: to_runtime.clone(),
            tsfn,
            hold: hold.clone(),
        });
        if direct_sends != Some(true) {
            return Ok(());
        }
        // The direct path's settles reach JavaScript from its loop callbacks with no
        // threadsafe-function hop; a host without libuv (or an engine without the path)
        // just has no direct path.
        // SAFETY: inside this napi call, on its thread; `callback` is a function.
        let here = unsafe { loop_callback::LoopCallback::new(env.raw(), callback.raw()) };
        let raw_env = env.raw();
        let report_here = here.map(|here| -> LoopReport {
            std::rc::Rc::new(move |batch| {
                let count = batch.len();
                let mut batch = Some(batch);
                // SAFETY: the direct path calls this only from its loop callbacks.
                let called = unsafe {
                    here.call(|env| {
                        let settled = settled_sends(batch.take().unwrap_or_default());
                        // On the env's thread, inside the scope `call` opened.
                        <SettledSends as JsValuesTupleIntoVec>::into_vec(settled, env)
                    })
                };
                if !called {
                    if batch.is_none() {
                        // Taken, then the call failed (the environment is going away): no
                        // report is coming for these sends, so they hold the loop no more.
                        hold.reported(&Env::from_raw(raw_env), count);
                    }
                    return batch;
                }
                // After the call: sends made in its promise jobs are counted by now.
                hold.reported(&Env::from_raw(raw_env), count);
                None
            })
        });
        *self.direct.locked() = DirectSends::new(
            env,
            self.queue.clone(),
            report,
            report_here,
            to_runtime,
            self.on_runtime_path.clone(),
        );
        Ok(())
    }

    /// Stores one message as send `seq`; sends in flight together share one INSERT and
    /// keep the order of the calls. The id (or the failure) comes back through the
    /// `onSendsSettled` callback; a message the storage is known to refuse throws here.
    #[napi(
        catch_unwind,
        ts_args_type = "seq: number, body: string, headers: string, delayMs: number"
    )]
    pub fn send_queued(
        &self,
        env: &Env,
        seq: u32,
        body: JsText,
        headers: JsText,
        delay_ms: f64,
    ) -> napi::Result<()> {
        let message = NewMessage::new(body.0, headers.0, delay_ms);
        let sends = self.sends.locked();
        let Some(reporter) = sends.as_ref() else {
            return Err(Error::transport("sendQueued() before onSendsSettled().").into());
        };
        let direct = self.direct.locked();
        let taken_here = match direct.as_ref() {
            // Handed back when the direct path does not take it.
            Some(direct) => direct.try_send(seq, message)?,
            None => Some(message),
        };
        drop(direct);
        if let Some(message) = taken_here {
            (reporter.to_runtime)(seq, message)?;
        }
        // Counted once queued, whatever path it took: its report is on its way.
        reporter.hold.queued(env, &reporter.tsfn);
        Ok(())
    }

    /// The next prefetched message as `[id, body, headers]`, or null when the buffer is
    /// empty. Never waits.
    #[napi(
        catch_unwind,
        ts_return_type = "[id: string, body: string, headers: string] | null"
    )]
    pub fn take(&self) -> Option<JsMessage> {
        self.queue.take().map(JsMessage)
    }

    /// Claims a batch, waiting while the queue is idle. Resolves true when `take()` has
    /// something, false when `cancelWait(waitId)` or close ended the wait.
    #[napi]
    pub async fn fill(&self, wait_id: u32) -> napi::Result<bool> {
        Ok(self.queue.fill(wait_id).await?)
    }

    /// Ends the `fill` of `waitId`, or makes its next `fill` return false at once.
    #[napi(catch_unwind)]
    pub fn cancel_wait(&self, wait_id: u32) {
        self.queue.cancel_wait(wait_id);
    }

    /// Forgets `waitId` when its `get()` loop ends.
    #[napi(catch_unwind)]
    pub fn forget_wait(&self, wait_id: u32) {
        self.queue.forget_wait(wait_id);
    }

    /// Makes prefetched, never-yielded messages claimable again.
    #[napi]
    pub async fn release_prefetched(&self) -> napi::Result<()> {
        Ok(self.queue.release_prefetched().await?)
    }

    /// Deletes by id (idempotent); concurrent calls share one DELETE.
    #[napi]
    pub async fn ack(&self, id: String) -> napi::Result<()> {
        Ok(self.queue.ack(&id).await?)
    }

    /// Records an ack now and writes its delete in the background with the others
    /// (write-behind); `close`, `list`, `find` and `count` wait for those writes.
    #[napi(catch_unwind)]
    pub fn ack_later(&self, id: String) -> napi::Result<()> {
        Ok(within_runtime_if_available(|| self.queue.ack_later(id))?)
    }

    /// Write-behind acks recorded and not yet written (JavaScript keeps its event loop
    /// alive while there are any).
    #[napi(catch_unwind)]
    pub fn pending_acks(&self) -> f64 {
        self.queue.stats_pending_acks() as f64
    }

    /// The most one write (a send, a batch of acks) may take before it is given up, in
    /// milliseconds: JavaScript holds its event loop for pending acks while they make progress
    /// within it, and lets the process end once they have not for longer.
    #[napi(catch_unwind)]
    pub fn write_bound_ms(&self) -> f64 {
        self.queue.send_bound().as_millis() as f64
    }

    /// Gives up a delivered message without a write (its settle failed before one was made):
    /// its claim is no longer renewed and lapses at the lease. Acks and rejects stop the
    /// renewal themselves.
    #[napi(catch_unwind)]
    pub fn give_up(&self, id: String) {
        self.queue.give_up(&id);
    }

    /// Counters and buffer figures of this instance, read synchronously (see `queue/stats.rs`).
    #[napi(catch_unwind)]
    pub fn stats(&self) -> NativeStats {
        NativeStats::from(self.queue.stats())
    }

    /// Replaces message `id` by a copy in one statement; null if `id` no longer exists.
    #[napi]
    pub async fn redeliver(
        &self,
        id: String,
        body: String,
        headers: String,
        delay_ms: f64,
    ) -> napi::Result<Option<String>> {
        Ok(self
            .queue
            .redeliver(&id, NewMessage::new(body, headers, delay_ms))
            .await?)
    }

    #[napi]
    pub async fn list(&self, limit: u32) -> napi::Result<Vec<NativeMessage>> {
        Ok(self
            .queue
            .list(limit)
            .await?
            .into_iter()
            .map(NativeMessage::from)
            .collect())
    }

    #[napi]
    pub async fn find(&self, id: String) -> napi::Result<Option<NativeMessage>> {
        Ok(self.queue.find(&id).await?.map(NativeMessage::from))
    }

    #[napi]
    pub async fn count(&self) -> napi::Result<f64> {
        Ok(self.queue.count().await? as f64)
    }

    /// From now on, keeps the events a logger must hear of, for `takeEvents`.
    #[napi(catch_unwind)]
    pub fn watch_events(&self) {
        self.queue.watch_events();
    }

    /// The events kept since the last call, oldest first.
    #[napi(catch_unwind)]
    pub fn take_events(&self) -> Vec<NativeEvent> {
        self.queue
            .take_events()
            .into_iter()
            .map(|e| NativeEvent {
                level: e.level.name().to_owned(),
                message: e.message,
            })
            .collect()
    }

    /// A bounded health probe: the message count and the probe's duration in ms.
    #[napi]
    pub async fn health(&self, timeout_ms: f64) -> napi::Result<NativeHealth> {
        let bound = millis(timeout_ms, "timeoutMs")?;
        let (messages, took) = self.queue.health(bound).await?;
        Ok(NativeHealth {
            messages: messages as f64,
            latency_ms: took.as_secs_f64() * 1000.0,
        })
    }

    /// Stops new claims and ends every idle wait at once.
    #[napi(catch_unwind)]
    pub fn begin_close(&self) {
        // Batches in flight on the direct path go on, as the same batches, on the runtime.
        if let Some(direct) = self.direct.locked().take() {
            direct.shut();
        }
        self.queue.begin_close();
    }

    /// Releases prefetched rows and lets go of the shared pool; then of the send callback,
    /// whose strong reference would otherwise keep this object (and the native queue, its
    /// tasks and memory) alive for as long as the environment lives.
    #[napi]
    pub async fn close(&self) -> napi::Result<()> {
        let closed = self.queue.close().await;
        // JavaScript waits for every send before it closes: nothing is left to report.
        drop(self.sends.locked().take());
        Ok(closed?)
    }
}
