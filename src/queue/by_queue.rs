//! State kept per queue (table and name) on one connection target, shared by every transport
//! of that queue in the process: what one transport leaves for the others to act on.
//!
//! Generic over what is kept, so that it depends on nothing.

use crate::support::locks::Locked;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A queue: its table and its name.
type QueueKey = (String, String);

/// One `V` per queue, made on first use.
pub struct ByQueue<V> {
    entries: Mutex<HashMap<QueueKey, Arc<V>>>,
}

impl<V> Default for ByQueue<V> {
    fn default() -> Self {
        Self {
            entries: Mutex::default(),
        }
    }
}

impl<V: Default> ByQueue<V> {
    /// The `V` of `queue` in `table`. Entries no transport holds any more are dropped when a
    /// new queue comes, so a process that opens and closes many queues keeps only the live ones.
    pub fn of(&self, table: &str, queue: &str) -> Arc<V> {
        let mut entries = self.lock();
        let key = (table.to_owned(), queue.to_owned());
        if let Some(entry) = entries.get(&key) {
            return entry.clone();
        }
        entries.retain(|_, entry| Arc::strong_count(entry) > 1);
        entries.entry(key).or_default().clone()
    }
}

impl<V> ByQueue<V> {
    /// The `V` of `queue` in `table`, if a transport made it.
    pub fn existing(&self, table: &str, queue: &str) -> Option<Arc<V>> {
        self.lock()
            .get(&(table.to_owned(), queue.to_owned()))
            .cloned()
    }

    /// Runs `f` on every queue's `V`.
    pub fn each(&self, f: impl Fn(&V)) {
        for entry in self.lock().values() {
            f(entry);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<QueueKey, Arc<V>>> {
        self.entries.locked()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_queue_shared_while_held() {
        let map: ByQueue<Mutex<u32>> = ByQueue::default();
        let a = map.of("t", "q");
        *a.lock().unwrap() = 7;
        assert_eq!(*map.of("t", "q").lock().unwrap(), 7);
        assert_eq!(*map.of("t", "other").lock().unwrap(), 0);
        assert_eq!(*map.of("u", "q").lock().unwrap(), 0);
    }

    #[test]
    fn entries_no_one_holds_are_dropped_when_a_queue_comes() {
        let map: ByQueue<Mutex<u32>> = ByQueue::default();
        for n in 0..1000 {
            let _held_briefly = map.of("t", &n.to_string());
        }
        let _kept = map.of("t", "kept");
        let _next = map.of("t", "next");
        assert_eq!(map.entries.lock().unwrap().len(), 2);
        assert!(map.existing("t", "kept").is_some());
        assert!(map.existing("t", "0").is_none());
    }
}
