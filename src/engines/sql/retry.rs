//! The one retry policy of the SQL dialects: transient failures (deadlock, serialization
//! failure, busy file: the statement was rolled back) get two more attempts with jittered
//! backoff; a statement that failed on a connection the server had dropped while it sat in the
//! pool is repeated on another, at once, when repeating it is safe ([`Repeat`]).
//!
//! A leaf: it imports only the shared failure kinds ([`super::errors`]); the caller passes
//! the pool's cap (how many dead connections the pool may hold) and the dialect's classifier.

use super::errors::Failure;
use std::time::Duration;

/// When a statement that failed on a lost connection may be sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// Idempotent (a claim, a delete, a release, a read): after any connection failure but a
    /// pool timeout (the server is down: report it).
    Idempotent,
    /// A write that must not run twice (a send): only after the server *answered* with an
    /// error (such as PostgreSQL's "terminating connection" on a pooled connection it had
    /// dropped: the statement did not run), never after a connection lost without an answer
    /// (it may have been applied).
    Answered,
}

/// Runs `attempt` again while it fails transiently (two more times, after 100 ms, then
/// 200 ms, ±10%), and again at once on another connection, as many times as the pool may hold
/// dead ones (`pool_cap`), when it met a connection the server had dropped and `repeat` allows
/// it.
pub async fn retry<T, F, Fut>(
    repeat: Repeat,
    pool_cap: u32,
    classify: impl Fn(&sqlx::Error) -> Failure,
    mut attempt: F,
) -> std::result::Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
{
    let mut delay_ms = 100.0_f64;
    let mut tries = 0;
    let mut stale = 0;
    loop {
        tries += 1;
        match attempt().await {
            Err(err) if stale < pool_cap && may_repeat(repeat, &classify, &err) => {
                stale += 1;
                tries -= 1;
            }
            Err(err) if tries < 3 && classify(&err) == Failure::Transient => {
                let jitter = 0.9 + 0.2 * crate::support::backoff::unit_jitter();
                tokio::time::sleep(Duration::from_micros((delay_ms * jitter * 1000.0) as u64))
                    .await;
                delay_ms *= 2.0;
            }
            other => return other,
        }
    }
}

/// Whether a connection failure may be met by sending the statement again at once.
fn may_repeat(
    repeat: Repeat,
    classify: &impl Fn(&sqlx::Error) -> Failure,
    err: &sqlx::Error,
) -> bool {
    if classify(err) != Failure::Connection {
        return false;
    }
    match repeat {
        Repeat::Idempotent => !matches!(err, sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed),
        Repeat::Answered => matches!(err, sqlx::Error::Database(_)),
    }
}
