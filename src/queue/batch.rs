//! Group commit: concurrent requests of one kind (sends, commit-mode acks) are gathered while
//! the previous flush runs and written together by the next one, as one statement.
//!
//! The writes run on a flusher task of their own, started when a request finds none running
//! and ending when nothing is queued: no caller's timeout or drop can cancel a write half-way,
//! and each caller hears its own answer (a flush answers each request for itself) as soon as
//! the flush that carried it is done. Before taking a batch the flusher waits for what must
//! come first (`Prepare`: earlier writes, a first-use setup), so a request is still queued,
//! and can be withdrawn, while that wait lasts. A caller that stops waiting before its request
//! was taken off the queue withdraws it (it is then never written, so "not stored" is the
//! truth); once taken, it was sent, and its fate is the flush's. The queue is bounded
//! (`Backlog`): beyond it a request is refused at once.

use crate::support::error::{Error, Outcome, Result};
use crate::support::locks::Locked;
use futures_util::future::BoxFuture;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

type Reply<R> = oneshot::Sender<Result<R>>;
type FlushFn<T, R> = dyn Fn(Vec<T>) -> BoxFuture<'static, Vec<Result<R>>> + Send + Sync;
type PrepareFn = dyn Fn() -> BoxFuture<'static, Result<()>> + Send + Sync;

/// A request waits in the queue, was taken by a flush, or was withdrawn by its caller.
const QUEUED: u8 = 0;
const SENT: u8 = 1;
const WITHDRAWN: u8 = 2;

/// How much one flush may carry: at most `items` requests, and at most `bytes` by `weigh`
/// (a request alone over it is flushed alone).
pub struct BatchBound<T> {
    pub items: usize,
    pub bytes: usize,
    pub weigh: fn(&T) -> usize,
}

// By hand: derived ones would ask `T: Copy`, and only the bound is copied, never a request.
impl<T> Clone for BatchBound<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for BatchBound<T> {}

impl<T> BatchBound<T> {
    /// At most `items` requests, whatever their size.
    pub fn items(items: usize) -> Self {
        Self {
            items,
            bytes: usize::MAX,
            weigh: |_| 0,
        }
    }

    /// How many of `queued` (in order) the next flush takes: at least one.
    pub(crate) fn take<X>(&self, queued: &[(T, X)]) -> usize {
        self.take_of(queued.iter().map(|(item, _)| item))
    }

    fn take_of<'a>(&self, queued: impl Iterator<Item = &'a T>) -> usize
    where
        T: 'a,
    {
        let mut bytes = 0usize;
        let mut take = 0;
        for item in queued.take(self.items.max(1)) {
            bytes = bytes.saturating_add((self.weigh)(item));
            if take > 0 && bytes > self.bytes {
                break;
            }
            take += 1;
        }
        take
    }
}

/// How much may wait to be written: beyond `items` requests or `bytes` (by the batch bound's
/// weight) a new request is refused at once. A request alone is never refused for its size:
/// the storage's own limit speaks for that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    pub items: usize,
    pub bytes: usize,
}

impl Backlog {
    pub const UNBOUNDED: Backlog = Backlog {
        items: usize::MAX,
        bytes: usize::MAX,
    };
}

struct Request<T, R> {
    item: T,
    reply: Reply<R>,
    state: Arc<AtomicU8>,
    weight: usize,
}

struct Shared<T, R> {
    queued: Vec<Request<T, R>>,
    flushing: bool,
    /// Requests queued and not withdrawn, and their weight: what the backlog bound counts.
    waiting_items: usize,
    waiting_bytes: usize,
}

impl<T, R> Shared<T, R> {
    fn forget(&mut self, weight: usize) {
        self.waiting_items = self.waiting_items.saturating_sub(1);
        self.waiting_bytes = self.waiting_bytes.saturating_sub(weight);
    }

    /// Takes the first `count` queued requests off the queue as sent, leaving out those
    /// withdrawn meanwhile: a caller may withdraw until this exchange, from here on it was sent.
    fn take_sent(&mut self, count: usize) -> Vec<Request<T, R>> {
        let taken: Vec<Request<T, R>> = self.queued.drain(..count).collect();
        let mut sent = Vec::with_capacity(taken.len());
        for request in taken {
            if request
                .state
                .compare_exchange(QUEUED, SENT, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                self.forget(request.weight);
                sent.push(request);
            }
        }
        sent
    }
}

/// Coalesces requests of type `T` answered by `R`, at most `bound` per flush.
pub struct Coalescer<T, R> {
    flush: Arc<FlushFn<T, R>>,
    prepare: Option<Arc<PrepareFn>>,
    bound: BatchBound<T>,
    backlog: Backlog,
    shared: Arc<Mutex<Shared<T, R>>>,
}

/// What a caller that waited at most some time heard.
#[derive(Debug)]
pub enum Waited<R> {
    /// The flush that carried the request answered (or failed: its error says whether the
    /// write may have run).
    Answered(Result<R>),
    /// Still queued when the wait ended: withdrawn, never written.
    NotSent,
    /// Taken by a flush that has not answered yet: it may have been written.
    Unanswered,
}

/// One queued request's answer to come; dropping it withdraws the request if no flush took
/// it yet.
pub struct Pending<T, R> {
    answer: oneshot::Receiver<Result<R>>,
    state: Arc<AtomicU8>,
    weight: usize,
    shared: Arc<Mutex<Shared<T, R>>>,
}

impl<T, R> Pending<T, R> {
    /// Withdraws the request if it is still queued; false if a flush took it.
    fn withdraw(&self) -> bool {
        let withdrawn = self
            .state
            .compare_exchange(QUEUED, WITHDRAWN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if withdrawn {
            let mut s = self.shared.locked();
            s.forget(self.weight);
            // Its message (a send's body) goes now, not with the next flush, which may be
            // held up for as long as the writes that made this caller give up.
            if let Some(at) = s
                .queued
                .iter()
                .position(|r| Arc::ptr_eq(&r.state, &self.state))
            {
                s.queued.remove(at);
            }
        }
        withdrawn
    }

    /// Waits for the answer with no bound.
    pub async fn answer(mut self) -> Result<R> {
        match (&mut self.answer).await {
            Ok(result) => result,
            Err(_) => Err(stopped()),
        }
    }

    /// Waits for the answer at most `bound`.
    pub async fn within(mut self, bound: Duration) -> Waited<R> {
        match tokio::time::timeout(bound, &mut self.answer).await {
            Ok(Ok(result)) => Waited::Answered(result),
            Ok(Err(_)) if self.withdraw() => Waited::NotSent,
            Ok(Err(_)) => Waited::Answered(Err(stopped())),
            Err(_) if self.withdraw() => Waited::NotSent,
            Err(_) => Waited::Unanswered,
        }
    }
}

impl<T, R> Drop for Pending<T, R> {
    fn drop(&mut self) {
        self.withdraw();
    }
}

fn stopped() -> Error {
    Error::transport("The transport's writer stopped before answering (the write may have run).")
        .with_outcome(Outcome::Unknown)
}

impl<T: Send + 'static, R: Send + 'static> Coalescer<T, R> {
    /// `flush` receives a batch and must answer one result per item, in order.
    pub fn new(
        bound: BatchBound<T>,
        backlog: Backlog,
        flush: impl Fn(Vec<T>) -> BoxFuture<'static, Vec<Result<R>>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            flush: Arc::new(flush),
            prepare: None,
            bound,
            backlog,
            shared: Arc::new(Mutex::new(Shared {
                queued: Vec::new(),
                flushing: false,
                waiting_items: 0,
                waiting_bytes: 0,
            })),
        }
    }

    /// Makes every flush wait for `prepare` before it takes its batch off the queue: what it
    /// waits for is not yet the requests' fate, so they can still be withdrawn meanwhile. A
    /// failed `prepare` answers the requests queued then with its error, as not applied.
    pub fn prepared_by(
        mut self,
        prepare: impl Fn() -> BoxFuture<'static, Result<()>> + Send + Sync + 'static,
    ) -> Self {
        self.prepare = Some(Arc::new(prepare));
        self
    }

    /// Queues one request and waits for the flush that carries it.
    pub async fn submit(&self, item: T) -> Result<R> {
        self.enqueue(item)?.answer().await
    }

    /// Queues one request now (so requests keep the order of the calls that made them), and
    /// starts a flusher if none runs; needs a tokio runtime context. Refused at once when the
    /// backlog is full.
    pub fn enqueue(&self, item: T) -> Result<Pending<T, R>> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::transport("internal error: a write was queued outside the runtime")
        })?;
        let weight = (self.bound.weigh)(&item);
        let (reply, answer) = oneshot::channel();
        let state = Arc::new(AtomicU8::new(QUEUED));
        let start_flusher = {
            let mut s = self.shared.locked();
            let over = s.waiting_items >= self.backlog.items
                || (s.waiting_items > 0
                    && s.waiting_bytes.saturating_add(weight) > self.backlog.bytes);
            if over {
                return Err(Error::backlog_full(format!(
                    "The transport's write backlog is full ({} waiting, {} bytes; the bound is {} and {} bytes): refused, nothing was written.",
                    s.waiting_items, s.waiting_bytes, self.backlog.items, self.backlog.bytes
                )));
            }
            s.queued.push(Request {
                item,
                reply,
                state: state.clone(),
                weight,
            });
            s.waiting_items += 1;
            s.waiting_bytes = s.waiting_bytes.saturating_add(weight);
            !std::mem::replace(&mut s.flushing, true)
        };
        if start_flusher {
            let flusher = Flusher {
                shared: self.shared.clone(),
                flush: self.flush.clone(),
                prepare: self.prepare.clone(),
                bound: self.bound,
                finished: false,
            };
            runtime.spawn(flusher.run());
        }
        Ok(Pending {
            answer,
            state,
            weight,
            shared: self.shared.clone(),
        })
    }

    /// Requests queued and not withdrawn.
    pub fn waiting(&self) -> usize {
        self.shared.locked().waiting_items
    }
}

/// The task that writes what is queued, batch after batch, until nothing is.
struct Flusher<T, R> {
    shared: Arc<Mutex<Shared<T, R>>>,
    flush: Arc<FlushFn<T, R>>,
    prepare: Option<Arc<PrepareFn>>,
    bound: BatchBound<T>,
    /// `run` gave the lead up itself (another flusher may hold it by now).
    finished: bool,
}

impl<T, R> Drop for Flusher<T, R> {
    // A task dropped mid-flush (the runtime ends) lets the next request start a new one.
    fn drop(&mut self) {
        if !self.finished {
            self.shared.locked().flushing = false;
        }
    }
}

impl<T, R> Flusher<T, R> {
    /// Waits for what must come before the next batch; on failure, answers every request
    /// still queued with the error (none of them went out). False when nothing is queued.
    async fn prepared(&mut self) -> bool {
        let Some(prepare) = self.prepare.clone() else {
            return true;
        };
        let Err(err) = prepare().await else {
            return true;
        };
        let err = err.with_outcome(Outcome::NotApplied);
        let refused = {
            let mut s = self.shared.locked();
            let all = s.queued.len();
            s.take_sent(all)
        };
        for request in refused {
            let _ = request.reply.send(Err(err.clone()));
        }
        false
    }

    /// Drops withdrawn requests; true (and the lead given up) when nothing is left.
    fn done(&mut self) -> bool {
        let mut s = self.shared.locked();
        s.queued
            .retain(|r| r.state.load(Ordering::Acquire) != WITHDRAWN);
        if s.queued.is_empty() {
            // Under the lock enqueuers take: no request is left without a flusher.
            s.flushing = false;
            self.finished = true;
        }
        self.finished
    }

    async fn run(mut self) {
        loop {
            if self.done() {
                return;
            }
            if !self.prepared().await {
                continue;
            }
            let batch: Vec<Request<T, R>> = {
                let mut s = self.shared.locked();
                // A request withdrawn while the flush prepared has left the queue by itself
                // (one withdrawn as this batch is taken is left out by `take_sent`).
                if s.queued.is_empty() {
                    continue;
                }
                let take = self.bound.take_of(s.queued.iter().map(|r| &r.item));
                s.take_sent(take)
            };
            if batch.is_empty() {
                continue;
            }
            let count = batch.len();
            let (items, replies): (Vec<T>, Vec<Reply<R>>) =
                batch.into_iter().map(|r| (r.item, r.reply)).unzip();
            let results = (self.flush)(items).await;
            if results.len() == count {
                for (reply, result) in replies.into_iter().zip(results) {
                    let _ = reply.send(result);
                }
            } else {
                let err = Error::transport(format!(
                    "internal error: a batch of {count} got {} results",
                    results.len()
                ))
                .with_outcome(Outcome::Unknown);
                for reply in replies {
                    let _ = reply.send(Err(err.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
