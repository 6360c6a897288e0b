//! Group commit: concurrent requests of one kind (sends, commit-mode acks) are gathered while
//! the previous flush runs and written together by the next one, as one statement.
//!
//! There is no flusher task: the first waiter that finds no flush running becomes the leader,
//! flushes everything queued (its own request included), and keeps leading while requests
//! keep arriving. A lone request is thus written by its own future with no extra task hop,
//! and coalescing adds no latency when there is nothing to coalesce.

use crate::error::{Error, Result};
use futures_util::future::BoxFuture;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

type Reply<R> = oneshot::Sender<Result<R>>;
type FlushFn<T, R> = dyn Fn(Vec<T>) -> BoxFuture<'static, Result<Vec<R>>> + Send + Sync;

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
        let mut bytes = 0usize;
        let mut take = 0;
        for (item, _) in queued.iter().take(self.items.max(1)) {
            bytes = bytes.saturating_add((self.weigh)(item));
            if take > 0 && bytes > self.bytes {
                break;
            }
            take += 1;
        }
        take
    }
}

struct Shared<T, R> {
    queued: Vec<(T, Reply<R>)>,
    flushing: bool,
}

/// Coalesces requests of type `T` answered by `R`, at most `bound` per flush.
pub struct Coalescer<T, R> {
    flush: Arc<FlushFn<T, R>>,
    bound: BatchBound<T>,
    shared: Arc<Mutex<Shared<T, R>>>,
}

impl<T: Send + 'static, R: Send + 'static> Coalescer<T, R> {
    /// `flush` receives a batch and must answer one result per item, in order.
    pub fn new(
        bound: BatchBound<T>,
        flush: impl Fn(Vec<T>) -> BoxFuture<'static, Result<Vec<R>>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            flush: Arc::new(flush),
            bound,
            shared: Arc::new(Mutex::new(Shared {
                queued: Vec::new(),
                flushing: false,
            })),
        }
    }

    /// Queues one request and waits for the flush that carries it.
    pub async fn submit(&self, item: T) -> Result<R> {
        self.enqueue(item)?.await
    }

    /// Queues one request now (so requests keep the order of the calls that made them) and
    /// returns the wait for its answer.
    pub fn enqueue(
        &self,
        item: T,
    ) -> Result<impl std::future::Future<Output = Result<R>> + Send + 'static> {
        let (reply, mut answer) = oneshot::channel();
        lock(&self.shared).queued.push((item, reply));
        let shared = self.shared.clone();
        let flush = self.flush.clone();
        let bound = self.bound;
        Ok(async move {
            let lead = {
                let mut s = lock(&shared);
                !s.flushing && !s.queued.is_empty() && {
                    s.flushing = true;
                    true
                }
            };
            if lead {
                let mut guard = Leader {
                    shared,
                    flush,
                    bound,
                    finished: false,
                };
                lead_flushes(&guard.shared, guard.flush.as_ref(), bound).await;
                guard.finished = true;
            }
            match answer.try_recv() {
                Ok(result) => result,
                Err(oneshot::error::TryRecvError::Empty) => answer.await.map_err(|_| {
                    Error::transport("The transport's writer stopped before answering.")
                })?,
                Err(oneshot::error::TryRecvError::Closed) => Err(Error::transport(
                    "The transport's writer stopped before answering.",
                )),
            }
        })
    }
}

/// The lead, held by a waiter's future. If that future is dropped while leading, the lead
/// passes to a task of its own so the requests queued behind it are still written.
struct Leader<T: Send + 'static, R: Send + 'static> {
    shared: Arc<Mutex<Shared<T, R>>>,
    flush: Arc<FlushFn<T, R>>,
    bound: BatchBound<T>,
    finished: bool,
}

impl<T: Send + 'static, R: Send + 'static> Drop for Leader<T, R> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let (shared, flush, bound) = (self.shared.clone(), self.flush.clone(), self.bound);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { lead_flushes(&shared, flush.as_ref(), bound).await });
            }
            Err(_) => lock(&shared).flushing = false,
        }
    }
}

fn lock<T, R>(shared: &Mutex<Shared<T, R>>) -> std::sync::MutexGuard<'_, Shared<T, R>> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// Flushes batch after batch until nothing is queued, then gives up the lead (under the same
/// lock that enqueuers take, so no request is left without a leader).
async fn lead_flushes<T, R>(
    shared: &Mutex<Shared<T, R>>,
    flush: &FlushFn<T, R>,
    bound: BatchBound<T>,
) {
    loop {
        let batch: Vec<(T, Reply<R>)> = {
            let mut s = lock(shared);
            if s.queued.is_empty() {
                s.flushing = false;
                return;
            }
            let take = bound.take(&s.queued);
            s.queued.drain(..take).collect()
        };
        let (items, replies): (Vec<T>, Vec<Reply<R>>) = batch.into_iter().unzip();
        let count = items.len();
        match flush(items).await {
            Ok(results) if results.len() == count => {
                for (reply, result) in replies.into_iter().zip(results) {
                    let _ = reply.send(Ok(result));
                }
            }
            Ok(results) => {
                let err = Error::transport(format!(
                    "internal error: a batch of {count} got {} results",
                    results.len()
                ));
                for reply in replies {
                    let _ = reply.send(Err(err.clone()));
                }
            }
            Err(err) => {
                for reply in replies {
                    let _ = reply.send(Err(err.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn concurrent_requests_share_flushes_and_keep_their_order() {
        let flushes = Arc::new(AtomicUsize::new(0));
        let counter = flushes.clone();
        let coalescer = Arc::new(Coalescer::new(
            BatchBound::items(1000),
            move |items: Vec<u32>| {
                counter.fetch_add(1, Ordering::SeqCst);
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    Ok(items.into_iter().map(|i| i * 2).collect())
                }) as BoxFuture<'static, Result<Vec<u32>>>
            },
        ));
        let tasks: Vec<_> = (0..100u32)
            .map(|i| {
                let c = coalescer.clone();
                tokio::spawn(async move { (i, c.submit(i).await) })
            })
            .collect();
        for task in tasks {
            let (i, result) = task.await.unwrap();
            assert_eq!(result.unwrap(), i * 2);
        }
        let n = flushes.load(Ordering::SeqCst);
        assert!((1..100).contains(&n), "100 requests took {n} flushes");
    }

    #[tokio::test]
    async fn enqueued_requests_keep_their_call_order_within_a_batch() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let seen = batches.clone();
        let coalescer = Coalescer::new(BatchBound::items(1000), move |items: Vec<u32>| {
            seen.lock().unwrap().push(items.clone());
            Box::pin(async move { Ok(items) }) as BoxFuture<'static, Result<Vec<u32>>>
        });
        let waits: Vec<_> = (0..50u32).map(|i| coalescer.enqueue(i).unwrap()).collect();
        // Awaited in reverse: whichever future leads, the rows keep the call order.
        let mut waits = waits;
        waits.reverse();
        for (k, wait) in waits.into_iter().enumerate() {
            assert_eq!(wait.await.unwrap(), 49 - k as u32);
        }
        let flat: Vec<u32> = batches.lock().unwrap().concat();
        assert_eq!(flat, (0..50).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_failed_flush_fails_each_request_of_its_batch() {
        let coalescer = Coalescer::new(BatchBound::items(10), |_items: Vec<u32>| {
            Box::pin(async { Err(Error::connection("down")) })
                as BoxFuture<'static, Result<Vec<u32>>>
        });
        let err = coalescer.submit(1).await.unwrap_err();
        assert_eq!(err.message, "down");
    }

    #[tokio::test]
    async fn a_dropped_waiter_does_not_strand_the_others() {
        let coalescer = Coalescer::new(BatchBound::items(10), |items: Vec<u32>| {
            Box::pin(async move { Ok(items) }) as BoxFuture<'static, Result<Vec<u32>>>
        });
        let first = coalescer.enqueue(1).unwrap();
        let second = coalescer.enqueue(2).unwrap();
        drop(first);
        assert_eq!(second.await.unwrap(), 2);
    }

    #[tokio::test]
    async fn a_flush_carries_at_most_its_bytes_and_a_large_request_goes_alone() {
        let batches = Arc::new(Mutex::new(Vec::new()));
        let seen = batches.clone();
        let bound = BatchBound {
            items: 100,
            bytes: 10,
            weigh: |item: &u32| *item as usize,
        };
        let coalescer = Coalescer::new(bound, move |items: Vec<u32>| {
            seen.lock().unwrap().push(items.clone());
            Box::pin(async move { Ok(items) }) as BoxFuture<'static, Result<Vec<u32>>>
        });
        let waits: Vec<_> = [4, 4, 4, 30, 1, 2]
            .into_iter()
            .map(|i| coalescer.enqueue(i).unwrap())
            .collect();
        for wait in waits {
            wait.await.unwrap();
        }
        assert_eq!(
            *batches.lock().unwrap(),
            vec![vec![4, 4], vec![4], vec![30], vec![1, 2]]
        );
    }
}
