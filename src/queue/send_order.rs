//! Sends that must wait for earlier ones sent again. When the direct path (`direct_sends`)
//! loses its connection with batches in flight, or the server refuses them unrun, those
//! batches are sent again on the runtime while the sends behind them join the runtime's
//! group commit; without a gate the group commit could store them first. A hold is taken
//! before the later sends are queued and dropped when the batches sent again have settled;
//! every flush of the group commit waits for the holds taken before it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::Notify;

#[derive(Default)]
pub struct SendOrder {
    holds: AtomicUsize,
    released: Notify,
}

/// Keeps later sends waiting until dropped.
pub struct Hold(Arc<SendOrder>);

impl SendOrder {
    /// Holds back the sends queued from now on.
    pub fn hold(self: &Arc<Self>) -> Hold {
        self.holds.fetch_add(1, Ordering::AcqRel);
        Hold(self.clone())
    }

    /// Resolves once no hold is left (one atomic load in the common case: no await, no lock).
    pub async fn cleared(&self) {
        while self.holds.load(Ordering::Acquire) > 0 {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered before the check, so a release between the two is not missed.
            released.as_mut().enable();
            if self.holds.load(Ordering::Acquire) == 0 {
                return;
            }
            released.await;
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.0.holds.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.released.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::SendOrder;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_wait_ends_when_the_last_hold_goes() {
        let order = Arc::new(SendOrder::default());
        order.cleared().await;
        let (first, second) = (order.hold(), order.hold());
        let waiting = tokio::spawn({
            let order = order.clone();
            async move { order.cleared().await }
        });
        drop(first);
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(second);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("the wait ended")
            .expect("the task ran");
    }
}
