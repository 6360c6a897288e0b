//! The entries of a consumer's own pending list that its queue holds (buffered, in a handler,
//! or acked and not written yet), which a re-read of that list or an XAUTOCLAIM pass must skip
//! or they would be delivered twice.
//!
//! The queue names what it holds on every renewal round and every ack attempt; the engine is
//! not told when JavaScript gives a message up without a write, nor when an entry it held
//! leaves its pending list unseen. An entry the queue has not named for longer than a claim
//! lasts is therefore taken as no longer held: it is forgotten, and if it is still in our
//! pending list the next re-read or XAUTOCLAIM pass delivers it again, as any other consumer's
//! would. So the set holds only what was named recently, however many entries were given up.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// Beyond the claim idle time, how long an entry may go unnamed and still count as held: covers
/// the gaps between the queue's namings (a renewal period; a write-behind ack's retry pause,
/// at most 2 s, while the server is away).
const NAMING_SLACK: Duration = Duration::from_secs(3);

#[derive(Default)]
pub(super) struct Delivered {
    /// Entry id → when the queue last named it.
    named: HashMap<String, Instant>,
}

impl Delivered {
    /// Entries just handed to the queue.
    pub(super) fn hold(&mut self, ids: impl IntoIterator<Item = String>, now: Instant) {
        for id in ids {
            self.named.insert(id, now);
        }
    }

    /// The queue still holds these (a renewal, an ack being written): their clock restarts.
    /// Ids not held are left out: naming never adds.
    pub(super) fn name(&mut self, ids: &[String], now: Instant) {
        for id in ids {
            if let Some(at) = self.named.get_mut(id) {
                *at = now;
            }
        }
    }

    pub(super) fn forget(&mut self, ids: &[String]) {
        for id in ids {
            self.named.remove(id);
        }
    }

    /// Forgets what went unnamed for longer than `claim_idle` and the slack, and returns the
    /// rest: the entries to skip.
    pub(super) fn still_held(&mut self, now: Instant, claim_idle: Duration) -> HashSet<String> {
        let window = claim_idle.saturating_add(NAMING_SLACK);
        self.named
            .retain(|_, at| now.saturating_duration_since(*at) <= window);
        self.named.keys().cloned().collect()
    }

    pub(super) fn len(&self) -> usize {
        self.named.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    const CLAIM_IDLE: Duration = Duration::from_secs(1);

    #[test]
    fn entries_named_within_the_window_are_held_and_the_others_forgotten() {
        let start = Instant::now();
        let mut delivered = Delivered::default();
        delivered.hold(ids(&["1-0", "2-0", "3-0"]), start);
        // "1-0" is renewed, "2-0" acked and being written; "3-0" was given up.
        let later = start + CLAIM_IDLE + NAMING_SLACK;
        delivered.name(&ids(&["1-0", "2-0"]), later);
        let held = delivered.still_held(later + Duration::from_millis(1), CLAIM_IDLE);
        assert_eq!(held, ["1-0", "2-0"].map(String::from).into());
        assert_eq!(delivered.len(), 2);
    }

    #[test]
    fn naming_never_adds_and_forgetting_removes() {
        let now = Instant::now();
        let mut delivered = Delivered::default();
        delivered.hold(ids(&["1-0"]), now);
        delivered.name(&ids(&["9-0"]), now);
        assert_eq!(delivered.len(), 1);
        delivered.forget(&ids(&["1-0"]));
        assert!(delivered.still_held(now, CLAIM_IDLE).is_empty());
    }

    #[test]
    fn given_up_entries_do_not_pile_up() {
        let start = Instant::now();
        let mut delivered = Delivered::default();
        for round in 0..100u32 {
            let at = start + Duration::from_secs(u64::from(round));
            delivered.hold((0..50).map(|n| format!("{round}-{n}")), at);
            delivered.still_held(at, CLAIM_IDLE);
        }
        // Only the rounds of the last claim idle time and slack are left.
        let window_rounds = (CLAIM_IDLE + NAMING_SLACK).as_secs() as usize + 1;
        assert_eq!(delivered.len(), 50 * window_rounds);
    }
}
