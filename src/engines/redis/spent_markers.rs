//! The markers of batches whose first attempt was answered as stored (see `send_batch::SendBatch`).
//! Only a repeat of a batch reads its marker, and a batch answered at its first attempt is
//! never sent again: its marker can go at once rather than after its minute. They are deleted
//! a few dozen at a time, by one `DEL` on the command connection that nothing waits for, so a
//! stream under sustained sends keeps at most that many markers (and those of sends still
//! unanswered) instead of one per send of the last minute. A marker left behind (too few came
//! after it, or the `DEL` failed: an ACL without it, a dropped connection) expires as before.

use crate::support::locks::Locked;
use std::sync::Mutex;

/// How many spent markers one `DEL` deletes: one command per this many sends.
const PER_DELETE: usize = 64;

#[derive(Default)]
pub(super) struct SpentMarkers {
    keys: Mutex<Vec<String>>,
}

impl SpentMarkers {
    /// Notes the marker of a batch answered as stored at its first attempt; a full set of
    /// them is handed back, to be deleted (`RedisQueue::forget_marker`).
    pub(super) fn note(&self, marker: String) -> Option<Vec<String>> {
        let mut keys = self.keys.locked();
        keys.push(marker);
        (keys.len() >= PER_DELETE).then(|| std::mem::take(&mut *keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spent_markers_are_handed_back_a_full_set_at_a_time() {
        let spent = SpentMarkers::default();
        for i in 0..(PER_DELETE - 1) {
            assert!(spent.note(format!("m{i}")).is_none());
        }
        let full = spent.note("last".to_owned()).expect("a full set");
        assert_eq!(full.len(), PER_DELETE);
        assert_eq!(full.first().map(String::as_str), Some("m0"));
        assert!(spent.note("again".to_owned()).is_none());
    }
}
