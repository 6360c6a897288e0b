//! The SQL engines. Each submodule owns its SQL text, DDL and error classification; nothing
//! here builds SQL. The queue logic above (`crate::queue`) talks to an engine only through
//! [`SqlEngine`] and branches on its [`Capabilities`], never on which engine it is.

pub mod mysql;
pub mod pg_listener;
pub mod postgres;
pub mod shared;
pub mod sqlite;

use crate::dsn::{Engine, SqlDsn};
use crate::error::{Error, ErrorKind, Result};
use crate::wake::WakeSignal;
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;

/// A stored message as the engines hand it out: the id as a decimal string, body and headers
/// exactly as stored (the serializer in JavaScript decodes them).
#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub id: String,
    pub body: String,
    pub headers: String,
}

/// A message to insert: `delay_ms` is added to the database clock's `now`.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub body: String,
    pub headers: String,
    pub delay_ms: f64,
}

/// What an engine can do, so that the queue logic can choose without naming engines.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// Idle consumers can be woken by the database itself (PostgreSQL LISTEN/NOTIFY).
    pub push_wakeup: bool,
}

/// Everything a queue needs from storage, for one (table, queue) on one connection target.
pub trait SqlEngine: Send + Sync {
    fn capabilities(&self) -> Capabilities;
    /// The in-process wake signal of this engine's queue.
    fn wake_signal(&self) -> Arc<WakeSignal>;
    /// Creates the table and index if missing (the upstream DDL, byte for byte).
    fn setup(&self) -> BoxFuture<'_, Result<()>>;
    /// Inserts a batch in one statement; returns the new ids in input order.
    fn insert(&self, messages: Vec<NewMessage>) -> BoxFuture<'_, Result<Vec<String>>>;
    /// Claims up to `limit` due messages, oldest first, marking them delivered.
    fn claim(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>>;
    /// Deletes by id (ack, discard); ids that no longer exist are ignored.
    fn delete(&self, ids: Vec<i64>) -> BoxFuture<'_, Result<()>>;
    /// Atomically deletes `id` and inserts `copy` in its place; `None` if `id` was gone.
    fn redeliver(&self, id: i64, copy: NewMessage) -> BoxFuture<'_, Result<Option<String>>>;
    /// Makes claimed-but-unhandled messages claimable again at once.
    fn release(&self, ids: Vec<i64>) -> BoxFuture<'_, Result<()>>;
    /// Milliseconds until the next not-in-flight message of the queue is due (≤ 0: due now).
    fn next_due_in_ms(&self) -> BoxFuture<'_, Result<Option<f64>>>;
    /// Whether push wake-ups are live right now (starting the listener if needed).
    fn push_ready(&self) -> BoxFuture<'_, bool>;
    fn list(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>>;
    fn find(&self, id: i64) -> BoxFuture<'_, Result<Option<StoredMessage>>>;
    fn count(&self) -> BoxFuture<'_, Result<i64>>;
    /// Lets go of this queue's share of the pool; the last one out closes it.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

/// The options an engine needs besides its DSN.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    pub table: String,
    pub queue: String,
    pub redeliver_timeout_seconds: f64,
    pub use_notify: bool,
    pub connect_timeout: Duration,
}

/// Opens (or joins) the shared connection target for a DSN and returns the queue's engine.
pub fn open_engine(dsn: &SqlDsn, config: QueueConfig) -> Result<Arc<dyn SqlEngine>> {
    match dsn.engine {
        Engine::Postgres => Ok(Arc::new(postgres::PostgresQueue::open(dsn, config)?)),
        Engine::MySql => Ok(Arc::new(mysql::MySqlQueue::open(dsn, config)?)),
        Engine::Sqlite => Ok(Arc::new(sqlite::SqliteQueue::open(dsn, config)?)),
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
    engine: Engine,
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

/// The error for a server that accepted no connection within the connect timeout.
pub fn no_answer(engine: Engine, op: &str, timeout: Duration, secrets: &[String]) -> Error {
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
    loop {
        tries += 1;
        match attempt().await {
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
