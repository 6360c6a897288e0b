//! The plain objects `NativeQueue` returns: counters, logger events, a health probe's answer
//! and a listed message.

use crate::queue::engine::StoredMessage;
use crate::queue::stats::Snapshot;

/// `queue.stats()`: counters (as doubles: exact up to 2^53) and buffer figures.
#[napi(object)]
pub struct NativeStats {
    pub buffered: f64,
    pub in_flight: f64,
    pub pending_acks: f64,
    pub ack_write_failing_ms: Option<f64>,
    pub sent: f64,
    pub claims: f64,
    pub claimed: f64,
    pub empty_claims: f64,
    pub shared_polls: f64,
    pub acked: f64,
    pub rejected: f64,
    pub last_claim_size: f64,
    pub last_claim_ms: f64,
    pub reconnects: f64,
    pub stale_settles: f64,
    pub tracked_ids: f64,
    pub last_error: Option<String>,
}

/// An event for the `logger` option: `log`, `warn` or `error`, and what happened.
#[napi(object)]
pub struct NativeEvent {
    pub level: String,
    pub message: String,
}

/// `queue.health()`: what an answered probe saw.
#[napi(object)]
pub struct NativeHealth {
    pub messages: f64,
    pub latency_ms: f64,
}

/// A stored message handed to JavaScript: decimal id, body and headers as stored.
#[napi(object)]
pub struct NativeMessage {
    pub id: String,
    pub body: String,
    pub headers: String,
}

impl From<StoredMessage> for NativeMessage {
    fn from(m: StoredMessage) -> Self {
        Self {
            id: m.id,
            body: m.body,
            headers: m.headers,
        }
    }
}

impl From<Snapshot> for NativeStats {
    fn from(s: Snapshot) -> Self {
        Self {
            buffered: s.buffered as f64,
            in_flight: s.in_flight as f64,
            pending_acks: s.pending_acks as f64,
            ack_write_failing_ms: s.ack_write_failing_ms,
            sent: s.sent as f64,
            claims: s.claims as f64,
            claimed: s.claimed as f64,
            empty_claims: s.empty_claims as f64,
            shared_polls: s.shared_polls as f64,
            acked: s.acked as f64,
            rejected: s.rejected as f64,
            last_claim_size: s.last_claim_size as f64,
            last_claim_ms: s.last_claim_ms,
            reconnects: s.reconnects as f64,
            stale_settles: s.stale_settles as f64,
            tracked_ids: s.tracked_ids as f64,
            last_error: s.last_error,
        }
    }
}
