//! What keeps the event loop alive while JavaScript waits on sends, as a pending native
//! promise would: the queue's settle callback (a threadsafe function, weak otherwise) is held
//! from the first send queued until the last one is reported. Counted here, on the JavaScript
//! thread, where sends are queued and reported, so a send costs JavaScript no call of its own
//! to hold the loop and none to let it go.

use super::settled_sends::SettledTsfn;
use crate::support::locks::Locked;
use napi::Env;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, Weak};

#[derive(Default)]
pub(super) struct LoopHold {
    /// Sends queued and not reported to JavaScript yet.
    awaited: AtomicUsize,
    /// The settle callback, once built. Weak: the callback's own closure holds this hold.
    callback: OnceLock<Weak<Mutex<SettledTsfn>>>,
}

impl LoopHold {
    pub(super) fn bind(&self, callback: Weak<Mutex<SettledTsfn>>) {
        let _ = self.callback.set(callback);
    }

    /// A send was queued; called on the JavaScript thread, once the send is on its way (so
    /// nothing here may fail it: a ref that fails leaves the loop as it was).
    #[allow(deprecated)] // napi-rs's own way to (un)ref a threadsafe function.
    pub(super) fn queued(&self, env: &Env, callback: &Mutex<SettledTsfn>) {
        if self.awaited.fetch_add(1, Ordering::AcqRel) == 0 {
            let _ = callback.locked().refer(env);
        }
    }

    /// `count` sends were reported to JavaScript; called on the JavaScript thread. A report
    /// made straight from the loop calls this after JavaScript ran: the sends its promise jobs
    /// queued meanwhile are counted by then, so a sequential sender keeps the loop held.
    #[allow(deprecated)]
    pub(super) fn reported(&self, env: &Env, count: usize) {
        let before = self
            .awaited
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(count))
            })
            .unwrap_or_default();
        if before == 0 || before > count {
            return;
        }
        if let Some(callback) = self.callback.get().and_then(Weak::upgrade) {
            // Fails only once the environment is tearing down: nothing is held then.
            let _ = callback.locked().unref(env);
        }
    }
}
