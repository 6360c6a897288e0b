//! In-process wake-ups: one signal per (table, queue) and process, shared by every transport
//! on that queue. Senders in this process bump it, and so does the PostgreSQL listener when a
//! NOTIFY for the queue arrives; idle consumers wait on it instead of spinning.

use super::by_queue::ByQueue;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// A counter plus a notifier. A consumer reads the counter *before* it claims, and its wait
/// returns at once if the counter moved since, so a wake-up that raced the claim is not lost.
#[derive(Default)]
pub struct WakeSignal {
    seq: AtomicU64,
    notify: Notify,
}

/// Why a wait on a signal ended (an engine's idle wait answers with
/// `engine::WaitOutcome`, which adds what a wait that claims brings back).
#[derive(Debug, PartialEq, Eq)]
pub enum WaitEnd {
    Woken,
    TimedOut,
    Cancelled,
}

impl WakeSignal {
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    pub fn wake(&self) {
        self.seq.fetch_add(1, Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// Resolves once the signal has moved past `seen`.
    pub async fn changed(&self, seen: u64) {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.seq() != seen {
                return;
            }
            notified.await;
        }
    }

    /// Waits until the signal moves past `seen`, the timeout passes, or `cancel` fires.
    pub async fn wait(&self, seen: u64, timeout: Duration, cancel: &CancellationToken) -> WaitEnd {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        // Register before re-checking the counter: a wake between the check and the await
        // would otherwise be missed.
        notified.as_mut().enable();
        if self.seq() != seen {
            return WaitEnd::Woken;
        }
        tokio::select! {
            _ = &mut notified => WaitEnd::Woken,
            _ = tokio::time::sleep(timeout) => WaitEnd::TimedOut,
            _ = cancel.cancelled() => WaitEnd::Cancelled,
        }
    }
}

/// The wake signals of one connection target (process and DSN), keyed by (table, queue).
#[derive(Default)]
pub struct WakeBoard {
    signals: ByQueue<WakeSignal>,
}

impl WakeBoard {
    pub fn signal(&self, table: &str, queue: &str) -> Arc<WakeSignal> {
        self.signals.of(table, queue)
    }

    /// Wakes the consumers of one queue, if any exist in this process.
    pub fn wake(&self, table: &str, queue: &str) {
        if let Some(signal) = self.signals.existing(table, queue) {
            signal.wake();
        }
    }

    /// Wakes every consumer (the push channel changed state: they must re-check and re-plan).
    pub fn wake_all(&self) {
        self.signals.each(WakeSignal::wake);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_before_the_wait_is_not_lost() {
        let signal = WakeSignal::default();
        let seen = signal.seq();
        signal.wake();
        let outcome = signal
            .wait(seen, Duration::from_secs(5), &CancellationToken::new())
            .await;
        assert_eq!(outcome, WaitEnd::Woken);
    }

    #[tokio::test]
    async fn waits_time_out_and_cancel() {
        let signal = WakeSignal::default();
        let cancel = CancellationToken::new();
        let seen = signal.seq();
        assert_eq!(
            signal.wait(seen, Duration::from_millis(5), &cancel).await,
            WaitEnd::TimedOut
        );
        cancel.cancel();
        assert_eq!(
            signal.wait(seen, Duration::from_secs(5), &cancel).await,
            WaitEnd::Cancelled
        );
    }

    #[tokio::test]
    async fn board_wakes_only_the_named_queue() {
        let board = WakeBoard::default();
        let a = board.signal("t", "a");
        let b = board.signal("t", "b");
        let (sa, sb) = (a.seq(), b.seq());
        board.wake("t", "a");
        assert_ne!(a.seq(), sa);
        assert_eq!(b.seq(), sb);
        board.wake_all();
        assert_ne!(b.seq(), sb);
    }
}
