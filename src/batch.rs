//! Group commit: concurrent requests of one kind (acks, sends) are gathered while the previous
//! flush runs and written together by the next one, as one statement. A lone request is
//! flushed at once, so coalescing adds no latency when there is nothing to coalesce.

use crate::error::{Error, Result};
use futures_util::future::BoxFuture;
use std::sync::{Arc, OnceLock};
use tokio::sync::{mpsc, oneshot};

type Reply<R> = oneshot::Sender<Result<R>>;
type FlushFn<T, R> = dyn Fn(Vec<T>) -> BoxFuture<'static, Result<Vec<R>>> + Send + Sync;

/// Coalesces requests of type `T` answered by `R`, at most `max_batch` per flush.
pub struct Coalescer<T, R> {
    flush: Arc<FlushFn<T, R>>,
    max_batch: usize,
    sender: OnceLock<mpsc::UnboundedSender<(T, Reply<R>)>>,
}

impl<T: Send + 'static, R: Send + 'static> Coalescer<T, R> {
    /// `flush` receives a batch and must answer one result per item, in order.
    pub fn new(
        max_batch: usize,
        flush: impl Fn(Vec<T>) -> BoxFuture<'static, Result<Vec<R>>> + Send + Sync + 'static,
    ) -> Self {
        Self {
            flush: Arc::new(flush),
            max_batch: max_batch.max(1),
            sender: OnceLock::new(),
        }
    }

    /// Queues one request and waits for the flush that carries it.
    pub async fn submit(&self, item: T) -> Result<R> {
        self.enqueue(item)?.await
    }

    /// Queues one request now (so requests keep the order of the calls that made them) and
    /// returns the wait for its answer. Needs a runtime context on first use.
    pub fn enqueue(
        &self,
        item: T,
    ) -> Result<impl std::future::Future<Output = Result<R>> + Send + 'static> {
        let (reply, answer) = oneshot::channel();
        self.sender()
            .send((item, reply))
            .map_err(|_| Error::closed("The transport's writer has stopped."))?;
        Ok(async move {
            answer
                .await
                .map_err(|_| Error::transport("The transport's writer stopped before answering."))?
        })
    }

    // The flusher task is spawned on first use so that construction needs no runtime.
    fn sender(&self) -> &mpsc::UnboundedSender<(T, Reply<R>)> {
        self.sender.get_or_init(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(run_flusher(rx, self.flush.clone(), self.max_batch));
            tx
        })
    }
}

async fn run_flusher<T, R>(
    mut rx: mpsc::UnboundedReceiver<(T, Reply<R>)>,
    flush: Arc<FlushFn<T, R>>,
    max_batch: usize,
) {
    let mut batch = Vec::with_capacity(max_batch);
    // recv_many returns at once with whatever is queued (at least one), up to the limit.
    while rx.recv_many(&mut batch, max_batch).await > 0 {
        let (items, replies): (Vec<T>, Vec<Reply<R>>) = batch.drain(..).unzip();
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
        let coalescer = Arc::new(Coalescer::new(1000, move |items: Vec<u32>| {
            counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                Ok(items.into_iter().map(|i| i * 2).collect())
            }) as BoxFuture<'static, Result<Vec<u32>>>
        }));
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
        let coalescer = Coalescer::new(1000, |items: Vec<u32>| {
            Box::pin(async move { Ok(items) }) as BoxFuture<'static, Result<Vec<u32>>>
        });
        let waits: Vec<_> = (0..50u32).map(|i| coalescer.enqueue(i).unwrap()).collect();
        for (i, wait) in waits.into_iter().enumerate() {
            assert_eq!(wait.await.unwrap(), i as u32);
        }
    }

    #[tokio::test]
    async fn a_failed_flush_fails_each_request_of_its_batch() {
        let coalescer = Coalescer::new(10, |_items: Vec<u32>| {
            Box::pin(async { Err(Error::connection("down")) })
                as BoxFuture<'static, Result<Vec<u32>>>
        });
        let err = coalescer.submit(1).await.unwrap_err();
        assert_eq!(err.message, "down");
    }
}
