//! What every engine (SQL and Redis) shares per process and connection target: one registry
//! entry per DSN (so all transports on a DSN use one pool), and a first-connection probe.

use crate::support::error::{Error, Result};
use crate::support::locks::Locked;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};

/// Whether a transport that asks for `asked` connections (`maxConnections`, if it named one)
/// may join a live target whose budget is `live`: one budget per process and DSN, so another
/// value is refused and none joins.
pub fn same_budget(asked: Option<u32>, live: u32) -> Result<()> {
    match asked {
        Some(asked) if asked != live => Err(Error::invalid_argument(format!(
            "maxConnections {asked} differs from the {live} that the transports already open on \
             this DSN share (one budget per process and DSN): give every transport on it the \
             same maxConnections, or leave it out."
        ))),
        _ => Ok(()),
    }
}

/// Process-wide map from a DSN to its shared target and how many open queues use it. The
/// map holds the target weakly: a queue dropped without close() does not keep it alive.
pub struct Targets<T> {
    map: Mutex<HashMap<String, (Weak<T>, usize)>>,
}

impl<T> Default for Targets<T> {
    fn default() -> Self {
        Self {
            map: Mutex::default(),
        }
    }
}

impl<T> Targets<T> {
    /// The live target for `key`, or a new one from `make`; the caller is one more user.
    pub fn join(&self, key: &str, make: impl FnOnce() -> Result<T>) -> Result<Arc<T>> {
        self.join_if(key, |_| Ok(()), make)
    }

    /// As [`join`](Targets::join), but a live target is joined only if `fits` accepts it;
    /// its error otherwise (the caller is no user then).
    pub fn join_if(
        &self,
        key: &str,
        fits: impl FnOnce(&T) -> Result<()>,
        make: impl FnOnce() -> Result<T>,
    ) -> Result<Arc<T>> {
        let mut map = self.map.locked();
        if let Some((weak, users)) = map.get_mut(key) {
            if let Some(existing) = weak.upgrade() {
                fits(&existing)?;
                *users += 1;
                return Ok(existing);
            }
        }
        let target = Arc::new(make()?);
        map.insert(key.to_owned(), (Arc::downgrade(&target), 1));
        Ok(target)
    }

    /// Called once by a queue that closes; true if it was the target's last open user, in
    /// which case the target is forgotten (a later transport on the DSN gets a fresh one) and
    /// the caller closes it.
    pub fn leave(&self, key: &str, target: &Arc<T>) -> bool {
        let mut map = self.map.locked();
        let Some((weak, users)) = map.get_mut(key) else {
            return false;
        };
        if !std::ptr::eq(weak.as_ptr(), Arc::as_ptr(target)) {
            // A newer target took this key; ours was already left by everyone else.
            return false;
        }
        *users = users.saturating_sub(1);
        if *users == 0 {
            map.remove(key);
            return true;
        }
        false
    }
}

/// Remembers that the server answered once. Until it has, each operation first connects
/// directly, so an unreachable server fails at once with its real cause (a pool would retry
/// refused connections until its acquire timeout and then report only a timeout).
#[derive(Default)]
pub struct FirstContact {
    reached: tokio::sync::Mutex<bool>,
    seen: std::sync::atomic::AtomicBool,
}

impl FirstContact {
    /// Whether the server has answered once.
    pub fn reached(&self) -> bool {
        self.seen.load(std::sync::atomic::Ordering::Acquire)
    }

    pub async fn ensure<F: Future<Output = Result<()>>>(
        &self,
        probe: impl FnOnce() -> F,
    ) -> Result<()> {
        let mut reached = self.reached.lock().await;
        if !*reached {
            probe().await?;
            *reached = true;
            self.seen.store(true, std::sync::atomic::Ordering::Release);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_target_per_key_until_its_last_user_leaves() {
        let targets: Targets<u32> = Targets::default();
        let a = targets.join("k", || Ok(1)).unwrap();
        let b = targets.join("k", || Ok(2)).unwrap();
        assert_eq!((*a, *b), (1, 1));
        // Closed users still holding their Arc do not count.
        assert!(!targets.leave("k", &a));
        assert!(targets.leave("k", &b));
        let c = targets.join("k", || Ok(3)).unwrap();
        assert_eq!(*c, 3);
        // A stale target leaving does not disturb the new one.
        assert!(!targets.leave("k", &a));
        assert!(targets.leave("k", &c));
    }

    #[tokio::test]
    async fn probes_until_the_first_success() {
        let contact = FirstContact::default();
        let failed = contact
            .ensure(|| async { Err(crate::support::error::Error::connection("refused")) })
            .await;
        assert!(failed.is_err());
        contact.ensure(|| async { Ok(()) }).await.unwrap();
        let probed = std::sync::atomic::AtomicBool::new(false);
        contact
            .ensure(|| async {
                probed.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            })
            .await
            .unwrap();
        assert!(!probed.load(std::sync::atomic::Ordering::SeqCst));
    }
}
