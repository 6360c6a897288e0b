//! The one retry policy of the SQL dialects: transient failures (deadlock, serialization
//! failure, busy file: the statement was rolled back) get two more attempts with jittered
//! backoff; an idempotent statement that failed on a connection the server had dropped while
//! it sat in the pool is repeated on another. A write that must not run twice is never
//! repeated after a connection failure ([`with_rollback_retry`]): it may have been applied.

use super::errors::Failure;
use super::target::MAX_POOL_CONNECTIONS;
use std::time::Duration;

/// Runs `attempt` up to three times while it fails transiently: 100 ms, then 200 ms, ±10%.
/// A connection the server dropped while it sat in the pool (an I/O error, or the backend's
/// parting "terminating connection" error) fails the first statement sent on it, which never
/// ran: the attempt is repeated at once on another connection, as many times as the pool may
/// hold dead ones. A pool timeout is not repeated (the server is down: report it).
pub async fn with_transient_retry<T, F, Fut>(
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
            Err(err)
                if stale < MAX_POOL_CONNECTIONS
                    && classify(&err) == Failure::Connection
                    && !matches!(err, sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed) =>
            {
                stale += 1;
                tries -= 1;
                continue;
            }
            Err(err) if tries < 3 && classify(&err) == Failure::Transient => {
                let jitter = 0.9 + 0.2 * crate::backoff::unit_jitter();
                tokio::time::sleep(Duration::from_micros((delay_ms * jitter * 1000.0) as u64))
                    .await;
                delay_ms *= 2.0;
            }
            other => return other,
        }
    }
}

/// Runs `attempt` again only after failures that rolled it back: a deadlock, serialization
/// failure or busy file (as [`with_transient_retry`]), or the server's own refusal of the
/// statement on a connection it was ending (an error *response*, such as PostgreSQL's
/// "terminating connection" on a pooled connection the server dropped: the statement did not
/// run). Never after a connection lost without an answer: it may have been applied.
pub async fn with_rollback_retry<T, F, Fut>(
    classify: impl Fn(&sqlx::Error) -> Failure,
    mut attempt: F,
) -> std::result::Result<T, sqlx::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
{
    let mut delay_ms = 100.0_f64;
    let mut tries = 0;
    let mut refused = 0;
    loop {
        tries += 1;
        match attempt().await {
            Err(err @ sqlx::Error::Database(_))
                if refused < MAX_POOL_CONNECTIONS && classify(&err) == Failure::Connection =>
            {
                refused += 1;
                tries -= 1;
            }
            Err(err) if tries < 3 && classify(&err) == Failure::Transient => {
                let jitter = 0.9 + 0.2 * crate::backoff::unit_jitter();
                tokio::time::sleep(Duration::from_micros((delay_ms * jitter * 1000.0) as u64))
                    .await;
                delay_ms *= 2.0;
            }
            other => return other,
        }
    }
}
