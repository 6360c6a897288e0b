//! The prefetch buffer of one queue: claimed rows not yet handed to JavaScript, the rows
//! handed out and not yet settled, the consumer's pace, and the rules by which their claims
//! are renewed or handed back and the next batch is claimed ahead. Invariant: a row is renewed
//! while its handler runs or while the consumer keeps taking rows; rows behind a consumer that
//! stopped taking are handed back, not renewed.

use crate::queue::engine::StoredMessage;
use std::collections::{HashSet, VecDeque};
use std::time::{Duration, Instant};

/// Buffered rows behind a consumer that took none for this long (a slow or stuck handler)
/// are handed back for other consumers instead of being renewed.
pub const PREFETCH_HOLD: Duration = Duration::from_secs(5);
/// The next claim starts once the buffered rows hold no more work than this many times the
/// last claim's duration: the next claim may be larger (and slower) while batches grow, and it
/// should land before the buffer runs dry.
const READ_AHEAD_LEAD: u32 = 4;
/// Weight of the newest gap in the pace's moving average (1/16).
const PACE_SMOOTHING: u32 = 16;

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
    /// How long the consumer takes per row (a moving average of the gaps between takes that
    /// found rows waiting: time spent waiting for a claim is not handling time).
    pub pace: Option<Duration>,
    /// When the last take that left rows buffered happened.
    previous_take: Option<Instant>,
    /// How long the last claim statement ran.
    pub claim_took: Option<Duration>,
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
    /// The next row for JavaScript, noting it in flight and the consumer's pace.
    pub fn take(&mut self) -> Option<StoredMessage> {
        let row = self.rows.pop_front()?;
        self.in_flight.insert(row.id.clone());
        let now = Instant::now();
        if let Some(previous) = self.previous_take {
            let gap = now.saturating_duration_since(previous);
            self.pace = Some(match self.pace {
                None => gap,
                Some(pace) => pace - pace / PACE_SMOOTHING + gap / PACE_SMOOTHING,
            });
        }
        self.previous_take = (!self.rows.is_empty()).then_some(now);
        self.last_taken = Some(now);
        Some(row)
    }

    /// Whether to claim the next batch now, while JavaScript handles the buffered rows (at
    /// most one batch ahead: only after a claim that came back full). Once the consumer's pace
    /// is known: when the buffered work is about as long as a claim takes, so a fast consumer
    /// claims at once and a slow one holds no more rows than it needs; before: at half a batch.
    pub fn read_ahead_due(&self) -> bool {
        if !self.full {
            return false;
        }
        match (self.pace, self.claim_took) {
            (Some(pace), Some(took)) => {
                let buffered = u32::try_from(self.rows.len()).unwrap_or(u32::MAX);
                pace.saturating_mul(buffered) <= took.saturating_mul(READ_AHEAD_LEAD)
            }
            _ => self.rows.len() <= self.requested / 2,
        }
    }

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
            token: Some(crate::queue::engine::ClaimToken::DeliveredAt(1)),
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

    fn full_batch(size: usize) -> Prefetch {
        Prefetch {
            rows: (0..size).map(|i| row(&i.to_string())).collect(),
            requested: size,
            full: true,
            ..Prefetch::default()
        }
    }

    #[test]
    fn reads_ahead_at_half_a_batch_before_the_pace_is_known() {
        let mut prefetch = full_batch(8);
        for _ in 0..3 {
            prefetch.take();
            prefetch.pace = None;
            assert!(!prefetch.read_ahead_due());
        }
        prefetch.take();
        prefetch.pace = None;
        assert!(prefetch.read_ahead_due());
    }

    #[test]
    fn a_fast_consumer_reads_ahead_at_once_a_slow_one_near_the_end() {
        let mut fast = full_batch(1000);
        fast.claim_took = Some(Duration::from_millis(5));
        fast.pace = Some(Duration::from_micros(10));
        assert!(
            fast.read_ahead_due(),
            "10 ms of work left, claims take 5 ms"
        );

        let mut slow = full_batch(10);
        slow.claim_took = Some(Duration::from_millis(5));
        slow.pace = Some(Duration::from_millis(10));
        assert!(!slow.read_ahead_due(), "100 ms of work left");
        slow.rows.truncate(2);
        assert!(slow.read_ahead_due(), "20 ms of work left");

        slow.full = false;
        assert!(!slow.read_ahead_due(), "the last claim was not full");
    }

    #[test]
    fn the_pace_leaves_out_waits_for_a_claim() {
        let mut prefetch = full_batch(1);
        prefetch.pace = Some(Duration::from_millis(1));
        prefetch.take();
        // The buffer ran dry: the consumer waits for the next claim.
        std::thread::sleep(Duration::from_millis(20));
        prefetch.rows.extend([row("a"), row("b")]);
        prefetch.take();
        assert_eq!(prefetch.pace, Some(Duration::from_millis(1)));
        prefetch.take();
        let pace = prefetch.pace.expect("a pace");
        assert!(pace < Duration::from_millis(1), "{pace:?}");
        assert_eq!(prefetch.in_flight.len(), 3);
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
