//! Capped, jittered exponential backoff: the one pause every retry loop takes, so that many
//! processes meeting the same outage do not come back in lockstep (no login storms).

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    cap: Duration,
}

impl Backoff {
    pub fn new(first: Duration, cap: Duration) -> Self {
        Self { next: first, cap }
    }

    /// The next pause: the current step ±20%, then the step doubles up to the cap.
    pub fn next_pause(&mut self) -> Duration {
        let step = self.next;
        self.next = (self.next * 2).min(self.cap);
        step.mul_f64(0.8 + 0.4 * unit_jitter())
    }
}

/// A number in [0, 1) that differs from call to call and process to process; the quality
/// of randomness does not matter here.
pub fn unit_jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    (h.finish() % 10_000) as f64 / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_its_cap_with_jitter() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(500));
        let pauses: Vec<Duration> = (0..5).map(|_| backoff.next_pause()).collect();
        let bounds = [100, 200, 400, 500, 500];
        for (pause, step) in pauses.iter().zip(bounds) {
            let step = Duration::from_millis(step);
            assert!(
                *pause >= step.mul_f64(0.8) && *pause <= step.mul_f64(1.2),
                "{pause:?}"
            );
        }
    }
}
