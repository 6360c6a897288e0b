//! Group commit: order, coalescing, answers per request, the wait before a batch is taken,
//! withdrawal and the backlog bound.

use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::Notify;

fn echo() -> impl Fn(Vec<u32>) -> BoxFuture<'static, Vec<Result<u32>>> + Send + Sync {
    |items: Vec<u32>| {
        Box::pin(async move { items.into_iter().map(Ok).collect() })
            as BoxFuture<'static, Vec<Result<u32>>>
    }
}

/// A flush that waits for `gate` before answering, and records every batch it was given.
fn gated(
    gate: Arc<Notify>,
    seen: Arc<Mutex<Vec<Vec<u32>>>>,
) -> impl Fn(Vec<u32>) -> BoxFuture<'static, Vec<Result<u32>>> + Send + Sync {
    move |items: Vec<u32>| {
        seen.lock().unwrap().push(items.clone());
        let gate = gate.clone();
        Box::pin(async move {
            gate.notified().await;
            items.into_iter().map(Ok).collect()
        }) as BoxFuture<'static, Vec<Result<u32>>>
    }
}

type Seen = Arc<Mutex<Vec<Vec<u32>>>>;

/// A coalescer over a `gated` flush, with its gate and the batches it saw, and the first
/// request already taken by the flusher (which waits at the gate).
async fn gated_with_one_sent(
    bound: BatchBound<u32>,
    backlog: Backlog,
    first: u32,
) -> (Coalescer<u32, u32>, Arc<Notify>, Seen, Pending<u32, u32>) {
    let gate = Arc::new(Notify::new());
    let seen: Seen = Arc::default();
    let coalescer = Coalescer::new(bound, backlog, gated(gate.clone(), seen.clone()));
    let sent = coalescer.enqueue(first).unwrap();
    tokio::task::yield_now().await;
    (coalescer, gate, seen, sent)
}

#[tokio::test]
async fn concurrent_requests_share_flushes_and_keep_their_order() {
    let flushes = Arc::new(AtomicUsize::new(0));
    let counter = flushes.clone();
    let coalescer = Arc::new(Coalescer::new(
        BatchBound::items(1000),
        Backlog::UNBOUNDED,
        move |items: Vec<u32>| {
            counter.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                items.into_iter().map(|i| Ok(i * 2)).collect()
            }) as BoxFuture<'static, Vec<Result<u32>>>
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
    let coalescer = Coalescer::new(
        BatchBound::items(1000),
        Backlog::UNBOUNDED,
        move |items: Vec<u32>| {
            seen.lock().unwrap().push(items.clone());
            Box::pin(async move { items.into_iter().map(Ok).collect() })
                as BoxFuture<'static, Vec<Result<u32>>>
        },
    );
    let mut waits: Vec<_> = (0..50u32).map(|i| coalescer.enqueue(i).unwrap()).collect();
    // Awaited in reverse: the rows keep the call order all the same.
    waits.reverse();
    for (k, wait) in waits.into_iter().enumerate() {
        assert_eq!(wait.answer().await.unwrap(), 49 - k as u32);
    }
    let flat: Vec<u32> = batches.lock().unwrap().concat();
    assert_eq!(flat, (0..50).collect::<Vec<_>>());
}

#[tokio::test]
async fn each_request_hears_its_own_answer_from_a_flush() {
    // Odd items fail, even ones are stored: one batch, two fates.
    let coalescer = Coalescer::new(
        BatchBound::items(10),
        Backlog::UNBOUNDED,
        |items: Vec<u32>| {
            Box::pin(async move {
                items
                    .into_iter()
                    .map(|i| {
                        if i % 2 == 1 {
                            Err(Error::transport(format!("{i} refused")))
                        } else {
                            Ok(i)
                        }
                    })
                    .collect()
            }) as BoxFuture<'static, Vec<Result<u32>>>
        },
    );
    let waits: Vec<_> = (0..4u32).map(|i| coalescer.enqueue(i).unwrap()).collect();
    let mut answers = Vec::new();
    for wait in waits {
        answers.push(wait.answer().await.map_err(|e| e.message));
    }
    assert_eq!(
        answers,
        vec![
            Ok(0),
            Err("1 refused".into()),
            Ok(2),
            Err("3 refused".into())
        ]
    );
}

#[tokio::test]
async fn requests_stay_withdrawable_while_the_flush_prepares() {
    let gate = Arc::new(Notify::new());
    let prepare_gate = gate.clone();
    let seen: Seen = Arc::default();
    let coalescer = Coalescer::new(
        BatchBound::items(10),
        Backlog::UNBOUNDED,
        gated(Arc::new(Notify::new()), seen.clone()),
    )
    .prepared_by(move || {
        let gate = prepare_gate.clone();
        Box::pin(async move {
            gate.notified().await;
            Ok(())
        })
    });
    let first = coalescer.enqueue(1).unwrap();
    tokio::task::yield_now().await;
    // Its bound ran out while the flush still waited for what comes first: never sent.
    assert!(matches!(
        first.within(Duration::from_millis(30)).await,
        Waited::NotSent
    ));
    gate.notify_one();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        seen.lock().unwrap().is_empty(),
        "a withdrawn request was written"
    );
}

#[tokio::test]
async fn a_failed_preparation_answers_the_queued_requests_as_not_applied() {
    let coalescer = Coalescer::new(BatchBound::items(10), Backlog::UNBOUNDED, echo())
        .prepared_by(|| Box::pin(async { Err(Error::connection("setup failed")) }));
    let err = coalescer.submit(1).await.unwrap_err();
    assert_eq!(err.message, "setup failed");
    assert_eq!(err.outcome(), Some(Outcome::NotApplied));
    assert_eq!(coalescer.waiting(), 0);
}

#[tokio::test]
async fn a_dropped_waiter_does_not_strand_the_others() {
    let coalescer = Coalescer::new(BatchBound::items(10), Backlog::UNBOUNDED, echo());
    let first = coalescer.enqueue(1).unwrap();
    let second = coalescer.enqueue(2).unwrap();
    drop(first);
    assert_eq!(second.answer().await.unwrap(), 2);
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
    let coalescer = Coalescer::new(bound, Backlog::UNBOUNDED, move |items: Vec<u32>| {
        seen.lock().unwrap().push(items.clone());
        Box::pin(async move { items.into_iter().map(Ok).collect() })
            as BoxFuture<'static, Vec<Result<u32>>>
    });
    let waits: Vec<_> = [4, 4, 4, 30, 1, 2]
        .into_iter()
        .map(|i| coalescer.enqueue(i).unwrap())
        .collect();
    for wait in waits {
        wait.answer().await.unwrap();
    }
    assert_eq!(
        *batches.lock().unwrap(),
        vec![vec![4, 4], vec![4], vec![30], vec![1, 2]]
    );
}

#[tokio::test]
async fn the_first_caller_hears_its_answer_while_later_batches_are_written() {
    let (coalescer, gate, _, first) =
        gated_with_one_sent(BatchBound::items(10), Backlog::UNBOUNDED, 1).await;
    let second = coalescer.enqueue(2).unwrap();
    gate.notify_one();
    // The first batch is answered although the second one is being written and unanswered.
    let first = tokio::time::timeout(Duration::from_secs(1), first.answer()).await;
    assert_eq!(
        first
            .expect("the first answer waited for later batches")
            .unwrap(),
        1
    );
    gate.notify_one();
    assert_eq!(second.answer().await.unwrap(), 2);
}

#[tokio::test]
async fn a_caller_whose_bound_fires_while_queued_is_withdrawn_and_never_written() {
    let (coalescer, gate, seen, first) =
        gated_with_one_sent(BatchBound::items(10), Backlog::UNBOUNDED, 1).await;
    let second = coalescer.enqueue(2).unwrap();
    let (first, second) = tokio::join!(
        first.within(Duration::from_millis(50)),
        second.within(Duration::from_millis(50))
    );
    // The first was sent and is still unanswered; the second never left the queue.
    assert!(matches!(first, Waited::Unanswered), "{first:?}");
    assert!(matches!(second, Waited::NotSent), "{second:?}");
    gate.notify_one();
    let third = coalescer.enqueue(3).unwrap();
    gate.notify_one();
    assert_eq!(third.answer().await.unwrap(), 3);
    assert_eq!(*seen.lock().unwrap(), vec![vec![1], vec![3]]);
}

#[tokio::test]
async fn a_caller_that_stops_waiting_does_not_cancel_the_write() {
    let gate = Arc::new(Notify::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let written = Arc::new(AtomicUsize::new(0));
    let count = written.clone();
    let inner = gated(gate.clone(), seen);
    let coalescer = Coalescer::new(
        BatchBound::items(10),
        Backlog::UNBOUNDED,
        move |items: Vec<u32>| {
            let write = inner(items);
            let count = count.clone();
            Box::pin(async move {
                let result = write.await;
                count.fetch_add(1, Ordering::SeqCst);
                result
            }) as BoxFuture<'static, Vec<Result<u32>>>
        },
    );
    let first = coalescer.enqueue(1).unwrap();
    tokio::task::yield_now().await;
    assert!(matches!(
        first.within(Duration::from_millis(20)).await,
        Waited::Unanswered
    ));
    gate.notify_one();
    for _ in 0..100 {
        if written.load(Ordering::SeqCst) == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the write was cancelled with its caller");
}

#[tokio::test]
async fn a_full_backlog_refuses_at_once_and_frees_as_requests_leave() {
    let backlog = Backlog {
        items: 2,
        bytes: usize::MAX,
    };
    // The first request is taken by the flusher: no longer waiting.
    let (coalescer, gate, _, first) = gated_with_one_sent(BatchBound::items(1), backlog, 1).await;
    let second = coalescer.enqueue(2).unwrap();
    let third = coalescer.enqueue(3).unwrap();
    let refused = coalescer
        .enqueue(4)
        .err()
        .expect("a fourth request was queued");
    assert_eq!(refused.kind, crate::support::error::ErrorKind::BacklogFull);
    drop(third); // withdrawn: its place is free again
    let fourth = coalescer.enqueue(4).unwrap();
    for _ in 0..3 {
        gate.notify_one();
    }
    assert_eq!(first.answer().await.unwrap(), 1);
    assert_eq!(second.answer().await.unwrap(), 2);
    gate.notify_one();
    assert_eq!(fourth.answer().await.unwrap(), 4);
}

#[tokio::test]
async fn the_backlog_counts_bytes_but_never_refuses_a_lone_request() {
    let bound = BatchBound {
        items: 1,
        bytes: usize::MAX,
        weigh: |item: &u32| *item as usize,
    };
    let backlog = Backlog {
        items: 100,
        bytes: 10,
    };
    let (coalescer, gate, _, big) = gated_with_one_sent(bound, backlog, 50).await;
    let small = coalescer.enqueue(6).unwrap();
    assert!(coalescer.enqueue(5).is_err(), "6 + 5 bytes fit in 10");
    gate.notify_one();
    assert_eq!(big.answer().await.unwrap(), 50);
    gate.notify_one();
    assert_eq!(small.answer().await.unwrap(), 6);
}

#[tokio::test]
async fn a_withdrawn_request_lets_go_of_its_item_at_once() {
    let item = Arc::new(7u32);
    let weak = Arc::downgrade(&item);
    // Shared items, so that the test sees when one is dropped; a flush that never gets past
    // its preparation, so the request stays queued until withdrawn.
    let shared: Coalescer<Arc<u32>, u32> = Coalescer::new(
        BatchBound::items(10),
        Backlog::UNBOUNDED,
        |items: Vec<Arc<u32>>| {
            Box::pin(async move { items.into_iter().map(|i| Ok(*i)).collect() })
                as BoxFuture<'static, Vec<Result<u32>>>
        },
    )
    .prepared_by(|| Box::pin(std::future::pending()));
    let pending = shared.enqueue(item).unwrap();
    assert!(matches!(
        pending.within(Duration::from_millis(10)).await,
        Waited::NotSent
    ));
    assert!(weak.upgrade().is_none(), "the withdrawn item is still held");
}
