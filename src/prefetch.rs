//! The prefetch buffer of one queue: claimed rows not yet handed to JavaScript, the rows
//! handed out and not yet settled, and the rules by which their claims are renewed or handed
//! back. Invariant: a row is renewed while its handler runs or while the consumer keeps
//! taking rows; rows behind a consumer that stopped taking are handed back, not renewed.

use crate::engine::StoredMessage;
use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

/// Buffered rows behind a consumer that took none for this long (a slow or stuck handler)
/// are handed back for other consumers instead of being renewed.
pub const PREFETCH_HOLD: Duration = Duration::from_secs(5);

#[derive(Default)]
pub struct Prefetch {
    pub rows: VecDeque<StoredMessage>,
    /// When the current batch was handed over and how big it was, to size the next one.
    pub handed_at: Option<(Instant, usize)>,
    /// When the claim on the buffered and in-flight rows was last taken or renewed.
    pub renewed_at: Option<Instant>,
    /// When JavaScript last took a row, or a batch arrived.
    pub last_taken: Option<Instant>,
    /// Rows handed to JavaScript and not settled yet: their claim is renewed while the
    /// handler runs, so a live worker's message is not delivered to another consumer.
    pub in_flight: HashSet<String>,
    /// The last claim's size, and whether it came back full (more is likely waiting).
    pub requested: usize,
    pub full: bool,
    /// Average size of the last claimed messages, to keep a batch within `MAX_BATCH_BYTES`.
    pub average_bytes: usize,
}

impl Prefetch {
    /// One round of the keeper: the buffered rows to hand back (the consumer stalled), and
    /// the rows whose claim is due for renewal (in flight, and buffered ones kept).
    pub fn keeper_round(&mut self, period: Duration) -> (Vec<String>, Vec<String>) {
        let stalled = !self.rows.is_empty()
            && self
                .last_taken
                .is_some_and(|at| at.elapsed() >= PREFETCH_HOLD);
        let hand_back: Vec<String> = if stalled {
            self.full = false;
            self.handed_at = None;
            self.rows.drain(..).map(|row| row.id).collect()
        } else {
            Vec::new()
        };
        let due = self.renewed_at.is_none_or(|at| at.elapsed() >= period);
        if !due || (self.rows.is_empty() && self.in_flight.is_empty()) {
            return (hand_back, Vec::new());
        }
        self.renewed_at = Some(Instant::now());
        let renew = self
            .rows
            .iter()
            .map(|row| row.id.clone())
            .chain(self.in_flight.iter().cloned())
            .collect();
        (hand_back, renew)
    }
}

impl Prefetch {
    /// Forgets messages whose claim another consumer now holds.
    pub fn drop_lost(&mut self, lost: &[String]) {
        if lost.is_empty() {
            return;
        }
        let lost: HashSet<&String> = lost.iter().collect();
        self.rows.retain(|row| !lost.contains(&row.id));
        self.in_flight.retain(|id| !lost.contains(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str) -> StoredMessage {
        StoredMessage {
            id: id.to_owned(),
            body: String::new(),
            headers: String::new(),
            token: Some(1),
        }
    }

    fn ago(duration: Duration) -> Option<Instant> {
        Instant::now().checked_sub(duration)
    }

    #[test]
    fn renews_in_flight_and_buffered_rows_while_the_consumer_takes() {
        let mut prefetch = Prefetch {
            rows: [row("2"), row("3")].into(),
            in_flight: ["1".to_owned()].into(),
            last_taken: Some(Instant::now()),
            renewed_at: ago(Duration::from_secs(2)),
            ..Prefetch::default()
        };
        let (hand_back, mut renew) = prefetch.keeper_round(Duration::from_secs(1));
        renew.sort();
        assert!(hand_back.is_empty());
        assert_eq!(renew, ["1", "2", "3"]);
        // Not due again until a period has passed.
        assert_eq!(
            prefetch.keeper_round(Duration::from_secs(1)),
            (vec![], vec![])
        );
    }

    #[test]
    fn hands_back_rows_buffered_behind_a_stalled_consumer_but_keeps_its_own() {
        let mut prefetch = Prefetch {
            rows: [row("2"), row("3")].into(),
            in_flight: ["1".to_owned()].into(),
            last_taken: ago(PREFETCH_HOLD + Duration::from_millis(1)),
            renewed_at: ago(Duration::from_secs(2)),
            ..Prefetch::default()
        };
        let (hand_back, renew) = prefetch.keeper_round(Duration::from_secs(1));
        assert_eq!(hand_back, ["2", "3"]);
        assert_eq!(renew, ["1"]);
        assert!(prefetch.rows.is_empty());
    }
}
