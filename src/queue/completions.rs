//! Batched completions: operations started from JavaScript (sends) settle through one driver
//! task per queue, which reports every completion that is ready at once in one batch (one
//! threadsafe-function call). A promise per call from napi-rs costs a threadsafe function, a
//! libuv handle and a task spawn each; here a call costs a channel push, and concurrent ones
//! share the wake-up of the JavaScript thread.

use crate::support::error::{Error, Result};
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::FutureExt;
use tokio::sync::mpsc;

/// What one operation settled with, under the sequence number JavaScript gave it.
pub type Settled<T> = (u32, Result<T>);

type Started<T> = (u32, BoxFuture<'static, Result<T>>);

/// The sending side of one queue's driver; dropping it ends the driver once every operation
/// already handed to it has settled and been reported.
pub struct Completions<T> {
    started: mpsc::UnboundedSender<Started<T>>,
}

// By hand: a derived one would ask `T: Clone`, and only the channel is cloned.
impl<T> Clone for Completions<T> {
    fn clone(&self) -> Self {
        Self {
            started: self.started.clone(),
        }
    }
}

impl<T: Send + 'static> Completions<T> {
    /// Starts the driver on the current tokio runtime; `report` receives each batch.
    pub fn start(report: impl Fn(Vec<Settled<T>>) + Send + 'static) -> Self {
        let (started, incoming) = mpsc::unbounded_channel();
        tokio::spawn(drive(incoming, report));
        Self { started }
    }

    /// Hands over operation `seq`; its outcome comes back through `report`.
    pub fn push(
        &self,
        seq: u32,
        operation: impl std::future::Future<Output = Result<T>> + Send + 'static,
    ) -> Result<()> {
        self.started
            .send((seq, operation.boxed()))
            .map_err(|_| Error::transport("The completion driver of this queue has stopped."))
    }
}

async fn drive<T>(
    mut incoming: mpsc::UnboundedReceiver<Started<T>>,
    report: impl Fn(Vec<Settled<T>>),
) {
    let mut running = FuturesUnordered::new();
    let mut open = true;
    while open || !running.is_empty() {
        tokio::select! {
            // New operations first: polling them early is what lets concurrent sends share
            // one statement.
            biased;
            started = incoming.recv(), if open => match started {
                Some((seq, operation)) => running.push(operation.map(move |r| (seq, r))),
                None => open = false,
            },
            Some(first) = running.next(), if !running.is_empty() => {
                let mut batch = vec![first];
                while let Some(Some(next)) = running.next().now_or_never() {
                    batch.push(next);
                }
                report(batch);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[tokio::test]
    async fn reports_every_operation_once_with_its_sequence_number() {
        let seen: Arc<Mutex<Vec<Vec<u32>>>> = Arc::default();
        let sink = seen.clone();
        let completions = Completions::start(move |batch: Vec<Settled<u32>>| {
            let seqs = batch.iter().map(|(seq, _)| *seq).collect();
            for (seq, result) in &batch {
                assert_eq!(result.as_ref().ok(), Some(&(seq * 10)));
            }
            sink.lock().unwrap().push(seqs);
        });
        for seq in 0..50u32 {
            completions
                .push(seq, async move {
                    tokio::time::sleep(Duration::from_millis(u64::from(seq % 5))).await;
                    Ok(seq * 10)
                })
                .unwrap();
        }
        drop(completions);
        for _ in 0..200 {
            if seen.lock().unwrap().iter().map(Vec::len).sum::<usize>() == 50 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let batches = seen.lock().unwrap().clone();
        let mut all: Vec<u32> = batches.concat();
        all.sort_unstable();
        assert_eq!(all, (0..50).collect::<Vec<_>>());
        // Operations that finish together are reported together.
        assert!(batches.len() < 50, "{} batches", batches.len());
    }

    #[tokio::test]
    async fn a_failure_is_reported_as_its_operations_outcome() {
        let seen: Arc<Mutex<Vec<Settled<()>>>> = Arc::default();
        let sink = seen.clone();
        let completions = Completions::start(move |batch| sink.lock().unwrap().extend(batch));
        completions
            .push(7, async { Err(Error::transport("refused")) })
            .unwrap();
        for _ in 0..200 {
            if !seen.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].0, 7);
        assert!(seen[0].1.as_ref().is_err_and(|e| e.message == "refused"));
    }
}
