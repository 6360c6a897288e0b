//! The queue's sizes and bounds: how large a claim grows, what one write carries, how many
//! commit-mode acks may wait, how often claims are renewed, and how long reads wait for
//! failing ack writes.

use crate::queue::batch::{Backlog, BatchBound};
use crate::queue::engine::NewMessage;
use std::time::{Duration, Instant};

/// Most message bytes one claim aims to hold (with the average size of the last batch).
const MAX_BATCH_BYTES: usize = 16 * 1024 * 1024;
/// Largest claim; also bounds how many rows one consumer can hold before handling them.
pub const MAX_CLAIM_BATCH: u32 = 1024;
/// The first claim's size, before the consumer's pace is known.
pub const FIRST_CLAIM_BATCH: u32 = 16;
/// The most one claim may be larger than the one before it.
const MAX_CLAIM_GROWTH: u32 = 16;
/// A claim aims to hold about this much of the consumer's work (see `next_claim_size`).
const CLAIM_WINDOW: Duration = Duration::from_millis(100);
/// Claims are renewed at a third of their lease, but not more often than this.
pub(crate) const MIN_RENEW_PERIOD: Duration = Duration::from_millis(20);
/// How long close(), list(), find() and getMessageCount() wait for failing ack writes.
pub(crate) const ACK_FLUSH_PATIENCE: Duration = Duration::from_secs(5);
/// Largest batch one ack or send statement carries.
pub(crate) const MAX_WRITE_BATCH: usize = 1000;
/// What one send statement carries: also at most about `MAX_BATCH_BYTES` of message, so that
/// concurrent large sends do not make one statement the size of all of them.
pub(crate) const SEND_BOUND: BatchBound<NewMessage> = BatchBound {
    items: MAX_WRITE_BATCH,
    bytes: MAX_BATCH_BYTES,
    weigh: |m| m.body.len() + m.headers.len(),
};
/// Commit-mode acks waiting to be written: a worker awaits each of its acks, so only many
/// concurrent workers ever queue this many.
pub(crate) const ACK_BACKLOG: Backlog = Backlog {
    items: 100_000,
    bytes: usize::MAX,
};

/// The next claim's size: about `CLAIM_WINDOW` of the consumer's measured `pace` (or, before
/// it is known, of the time since the last batch of `handed.1` rows arrived at `handed.0`),
/// growing at most `MAX_CLAIM_GROWTH` times over `previous`, and holding at most about
/// `MAX_BATCH_BYTES` of messages of `average_bytes`.
pub fn next_claim_size(
    previous: u32,
    pace: Option<Duration>,
    handed: Option<(Instant, usize)>,
    average_bytes: usize,
) -> u32 {
    // The consumer's pace once known; before it, the time since the last batch arrived
    // spread over that batch.
    let per_message = match (pace, handed) {
        (Some(pace), _) => Some(pace.as_secs_f64()),
        (None, Some((at, count))) => Some(at.elapsed().as_secs_f64() / count.max(1) as f64),
        (None, None) => None,
    };
    let next = match per_message {
        None => previous,
        Some(per_message) => {
            let fit = if per_message <= 0.0 {
                MAX_CLAIM_BATCH as f64
            } else {
                CLAIM_WINDOW.as_secs_f64() / per_message
            };
            // Grow at most 16x per claim, so that a pace measured over a few cheap
            // messages does not claim the largest batch at once, while a fast consumer
            // still gets there in two claims after the first (16, 256, 1,024; at 4x it
            // took three, and the consumer waited out each).
            (fit.min(previous as f64 * f64::from(MAX_CLAIM_GROWTH)))
                .clamp(1.0, MAX_CLAIM_BATCH as f64) as u32
        }
    };
    // Large messages: hold at most about MAX_BATCH_BYTES in one batch.
    let by_size = (MAX_BATCH_BYTES / average_bytes.max(1)).max(1) as u32;
    next.min(by_size)
}
