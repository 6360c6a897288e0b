//! What every engine shares per process and connection target: one registry entry per DSN
//! (so all transports on a DSN use one pool), and a first-connection probe.

use crate::error::Result;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Weak};

/// Process-wide map from a DSN to its shared target. Entries are weak: a target lives as
/// long as a queue uses it.
pub struct Targets<T> {
    map: Mutex<HashMap<String, Weak<T>>>,
}

impl<T> Default for Targets<T> {
    fn default() -> Self {
        Self {
            map: Mutex::default(),
        }
    }
}

impl<T> Targets<T> {
    /// The live target for `key`, or a new one from `make`.
    pub fn join(&self, key: &str, make: impl FnOnce() -> Result<T>) -> Result<Arc<T>> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = map.get(key).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        let target = Arc::new(make()?);
        map.insert(key.to_owned(), Arc::downgrade(&target));
        Ok(target)
    }

    /// Called by a queue that is closing; true if it was the target's last user, in which
    /// case the target is forgotten (a later transport on the DSN gets a fresh one) and the
    /// caller closes it.
    pub fn leave(&self, key: &str, target: &Arc<T>) -> bool {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        let last = Arc::strong_count(target) <= 1;
        if last {
            map.remove(key);
        }
        last
    }
}

/// Remembers that the server answered once. Until it has, each operation first connects
/// directly, so an unreachable server fails at once with its real cause (a pool would retry
/// refused connections until its acquire timeout and then report only a timeout).
#[derive(Default)]
pub struct FirstContact {
    reached: tokio::sync::Mutex<bool>,
}

impl FirstContact {
    pub async fn ensure<F: Future<Output = Result<()>>>(
        &self,
        probe: impl FnOnce() -> F,
    ) -> Result<()> {
        let mut reached = self.reached.lock().await;
        if !*reached {
            probe().await?;
            *reached = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_target_per_key_while_used() {
        let targets: Targets<u32> = Targets::default();
        let a = targets.join("k", || Ok(1)).unwrap();
        let b = targets.join("k", || Ok(2)).unwrap();
        assert_eq!((*a, *b), (1, 1));
        assert!(!targets.leave("k", &a));
        drop(b);
        assert!(targets.leave("k", &a));
        let c = targets.join("k", || Ok(3)).unwrap();
        assert_eq!(*c, 3);
    }

    #[tokio::test]
    async fn probes_until_the_first_success() {
        let contact = FirstContact::default();
        let failed = contact
            .ensure(|| async { Err(crate::error::Error::connection("refused")) })
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
