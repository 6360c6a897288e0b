//! The SQL engines. Each submodule owns its SQL text, DDL and error classification; nothing
//! here builds SQL. The queue logic above (`crate::queue`) talks to an engine only through
//! [`SqlEngine`] and branches on its [`Capabilities`], never on which engine it is.

pub mod mysql;
pub mod pg_listener;
pub mod postgres;
pub mod sqlite;

use crate::dsn::{Dialect, SqlDsn};
use crate::error::{Error, ErrorKind, Result};
use crate::wake::{WaitOutcome, WakeSignal};
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub use crate::engine::{Engine, NewMessage, StoredMessage};

/// What a SQL engine can do, so that the shared idle wait can choose without naming engines.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// Idle consumers can be woken by the database itself (PostgreSQL LISTEN/NOTIFY).
    pub push_wakeup: bool,
}

/// The parts of a SQL engine the shared idle wait (`idle_wait`) needs.
pub trait SqlWaits: Send + Sync {
    fn capabilities(&self) -> Capabilities;
    fn config(&self) -> &QueueConfig;
    fn wake_signal(&self) -> Arc<WakeSignal>;
    /// Milliseconds until the next not-in-flight message of the queue is due (≤ 0: due now).
    fn next_due_in_ms(&self) -> BoxFuture<'_, Result<Option<f64>>>;
    /// Whether push wake-ups are live right now (starting the listener if needed).
    fn push_ready(&self) -> BoxFuture<'_, bool>;
}

/// Shortest idle wait: due rows that SKIP LOCKED skipped are re-tried this soon.
const MIN_IDLE_WAIT: Duration = Duration::from_millis(10);

/// The idle wait of every SQL engine: sleep until the next delayed message is due, capped by
/// the notify timeout while push wake-ups are live, else by the poll interval; any wake-up
/// (a NOTIFY, a send in this process) or `cancel` ends it early.
pub async fn idle_wait(
    engine: &dyn SqlWaits,
    seen: u64,
    cancel: &CancellationToken,
) -> Result<WaitOutcome> {
    let config = engine.config();
    let cap = if engine.capabilities().push_wakeup && engine.push_ready().await {
        config.notify_timeout
    } else {
        config.poll_interval
    };
    let timeout = if cap <= MIN_IDLE_WAIT {
        cap
    } else {
        // A failed peek just means "nothing scheduled": the cap still bounds the wait.
        match engine.next_due_in_ms().await {
            Ok(Some(ms)) => Duration::from_secs_f64((ms.max(0.0) / 1000.0).min(cap.as_secs_f64()))
                .max(MIN_IDLE_WAIT),
            _ => cap,
        }
    };
    Ok(engine.wake_signal().wait(seen, timeout, cancel).await)
}

/// `(1,2,3)`: ids are integers parsed in Rust, so inlining them cannot inject anything, and
/// the statement needs no prepared form per list length.
pub fn id_list(ids: &[i64]) -> String {
    let joined: Vec<String> = ids.iter().map(i64::to_string).collect();
    format!("({})", joined.join(","))
}

/// A row id as an integer: decimal digits only (no sign, as upstream's `/^\d+$/`), in range.
pub fn row_id(id: &str) -> Option<i64> {
    if crate::ident::is_decimal_id(id) {
        id.parse().ok()
    } else {
        None
    }
}

/// Row ids as integers; an id that is not one cannot be in a table and is skipped.
pub fn numeric_ids(ids: &[String]) -> Vec<i64> {
    ids.iter().filter_map(|id| row_id(id)).collect()
}

/// The options an engine needs besides its DSN.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    pub table: String,
    pub queue: String,
    pub redeliver_timeout_seconds: f64,
    pub use_notify: bool,
    pub connect_timeout: Duration,
    pub poll_interval: Duration,
    pub notify_timeout: Duration,
}

/// Opens (or joins) the shared connection target for a DSN and returns the queue's engine.
pub fn open_engine(dsn: &SqlDsn, config: QueueConfig) -> Result<Arc<dyn Engine>> {
    match dsn.dialect {
        Dialect::Postgres => Ok(Arc::new(postgres::PostgresQueue::open(dsn, config)?)),
        Dialect::MySql => Ok(Arc::new(mysql::MySqlQueue::open(dsn, config)?)),
        Dialect::Sqlite => Ok(Arc::new(sqlite::SqliteQueue::open(dsn, config)?)),
    }
}

/// How an engine classifies a driver error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Connection,
    NotFound,
    /// Serialization failure / deadlock / lock wait timeout: worth another attempt.
    Transient,
    Other,
}

/// Builds the user-facing error `<Engine> transport failed during "<op>": <driver message>`.
pub fn driver_error(
    engine: Dialect,
    op: &str,
    failure: Failure,
    detail: &str,
    secrets: &[String],
) -> Error {
    let kind = match failure {
        Failure::Connection => ErrorKind::Connection,
        Failure::NotFound => ErrorKind::NotFound,
        Failure::Transient | Failure::Other => ErrorKind::Transport,
    };
    Error::new(
        kind,
        format!(
            "{} transport failed during \"{op}\": {detail}",
            engine.label()
        ),
    )
    .redacted(secrets)
}

/// Connections per pool (per process and DSN).
pub const MAX_POOL_CONNECTIONS: u32 = 10;

/// The error for a server that accepted no connection within the connect timeout.
pub fn no_answer(engine: Dialect, op: &str, timeout: Duration, secrets: &[String]) -> Error {
    driver_error(
        engine,
        op,
        Failure::Connection,
        &format!(
            "no answer from the server within {} ms",
            timeout.as_millis()
        ),
        secrets,
    )
}

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
                let jitter = 0.9 + 0.2 * pseudo_random_unit();
                tokio::time::sleep(Duration::from_micros((delay_ms * jitter * 1000.0) as u64))
                    .await;
                delay_ms *= 2.0;
            }
            other => return other,
        }
    }
}

/// A cheap jitter source; the quality of randomness does not matter here.
fn pseudo_random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .elapsed()
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    (h.finish() % 10_000) as f64 / 10_000.0
}
