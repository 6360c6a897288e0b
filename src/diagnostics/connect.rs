//! Connections for `doctor` and `stats`: made as the transports make theirs (the dialect's own
//! connect options from `SqlDialect::open_target`, the Redis `Target` with its TCP settings),
//! each wait bounded, each failure an [`Error`] whose message holds no secret. SQLite files
//! are opened without being created and with `query_only`, so nothing here can change them.

use crate::engines::redis::connection::{Conn, ConnectOptions as RedisConnectOptions, Target};
use crate::engines::sql::sqlite::{parse_sqlite_location, SqliteLocation};
use crate::engines::sql::SqlDialect;
use crate::queue::wake::WakeBoard;
use crate::support::dsn::SqlDsn;
use crate::support::error::{Cause, Error, ErrorKind, Result};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection, Database, Pool};
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long any one statement or command of a check (doctor, stats) may take after
/// connecting: shorter than a transport's `STATEMENT_BOUND`, since someone is waiting on the
/// answer and a slow one is itself the finding.
pub const CHECK_STATEMENT_BOUND: Duration = Duration::from_secs(5);

/// This host's clock in epoch milliseconds.
pub fn host_now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// Milliseconds since `start`, for "connected in N ms".
pub fn elapsed_ms(start: Instant) -> u128 {
    start.elapsed().as_millis()
}

/// `fut` bounded by `bound`: its own failure through `describe`, running out of time as a
/// connection error naming `what`.
pub async fn bounded<T, E>(
    bound: Duration,
    what: &str,
    fut: impl Future<Output = std::result::Result<T, E>>,
    describe: impl FnOnce(E) -> Error,
) -> Result<T> {
    match tokio::time::timeout(bound, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(describe(err)),
        Err(_) => {
            let detail = format!("no answer within {} ms", bound.as_millis());
            Err(Error::connection(format!("{what}: {detail}")).caused_by(Cause::timed_out(detail)))
        }
    }
}

/// `fut`, a check's statement (or a few), bounded by [`CHECK_STATEMENT_BOUND`]; its failure in
/// the dialect's words, named `what`, secrets scrubbed.
pub async fn checked<D: SqlDialect, T>(
    dsn: &SqlDsn,
    what: &str,
    fut: impl Future<Output = std::result::Result<T, sqlx::Error>>,
) -> Result<T> {
    bounded(CHECK_STATEMENT_BOUND, what, fut, |e| {
        sql_error::<D>(what, e, &dsn.secrets)
    })
    .await
}

/// A driver error in the dialect's words (server errors with their code): failures below the
/// database are connection errors, the server's own refusals transport errors.
pub fn sql_error<D: SqlDialect>(what: &str, err: sqlx::Error, secrets: &[String]) -> Error {
    let (kind, detail) = match &err {
        sqlx::Error::Database(db) => (ErrorKind::Transport, D::describe(db.as_ref())),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed => (ErrorKind::Connection, err.to_string()),
        other => (ErrorKind::Transport, other.to_string()),
    };
    Error::new(kind, format!("{what}: {detail}"))
        .caused_by(D::cause(&err))
        .redacted(secrets)
}

/// A server dialect's direct connection (the options of the transport's pool) and its pool (the
/// transport's pool options, with what they run on each new connection), unopened.
pub struct SqlSession<D: SqlDialect> {
    pub conn: <D::Db as Database>::Connection,
    pub pool: Pool<D::Db>,
    pub connect_ms: u128,
}

/// Connects to a server dialect as its transport does, bounded by `timeout`.
pub async fn open_server<D: SqlDialect>(dsn: &SqlDsn, timeout: Duration) -> Result<SqlSession<D>> {
    let board = Arc::new(WakeBoard::default());
    let opened = D::open_target(dsn, timeout, &board, D::DEFAULT_MAX_CONNECTIONS)?;
    if !D::FACTS.has_server {
        return Err(Error::invalid_argument(format!(
            "{} has no server to connect to.",
            D::FACTS.label
        )));
    }
    let probe = opened.pool.connect_options();
    let start = Instant::now();
    let what = format!("connect to {}", dsn.redacted);
    let conn = bounded(timeout, &what, probe.connect(), |e| {
        sql_error::<D>(&what, e, &dsn.secrets)
    })
    .await?;
    Ok(SqlSession {
        conn,
        pool: opened.pool,
        connect_ms: elapsed_ms(start),
    })
}

impl<D: SqlDialect> SqlSession<D> {
    /// Closes the connection and the pool, bounded.
    pub async fn close(self) {
        tokio::time::timeout(CHECK_STATEMENT_BOUND, async {
            let _ = self.conn.close().await;
            self.pool.close().await;
        })
        .await
        .ok();
    }
}

/// The file a SQLite DSN names; an in-memory database is refused (it lives in one process).
pub fn sqlite_file(dsn: &SqlDsn) -> Result<PathBuf> {
    match parse_sqlite_location(&dsn.driver_url)? {
        SqliteLocation::File(path) => Ok(path),
        SqliteLocation::Memory => Err(Error::invalid_argument(
            "sqlite://:memory: is private to the process that opened it: there is nothing to inspect from outside.",
        )),
    }
}

/// Opens an existing SQLite file read-only in effect (`query_only`), never creating it and
/// never changing its journal mode; waits at most `timeout` for a lock.
pub async fn open_sqlite(path: &PathBuf, timeout: Duration) -> Result<(SqliteConnection, u128)> {
    if !path.exists() {
        return Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "{} does not exist (a transport creates it on first use)",
                path.display()
            ),
        ));
    }
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(false)
        .pragma("query_only", "ON")
        .busy_timeout(timeout.min(Duration::from_millis(i32::MAX as u64)))
        .disable_statement_logging();
    let start = Instant::now();
    let conn = bounded(timeout, "open", options.connect(), |e| {
        Error::connection(format!("open {}: {e}", path.display()))
    })
    .await?;
    Ok((conn, elapsed_ms(start)))
}

/// Closes a SQLite connection [`open_sqlite`] opened, bounded.
pub async fn close_sqlite(conn: SqliteConnection) {
    tokio::time::timeout(CHECK_STATEMENT_BOUND, conn.close())
        .await
        .ok();
}

/// A Redis command connection made as the transport makes its own, bounded by `timeout`.
pub async fn open_redis(
    dsn: &crate::support::dsn::RedisDsn,
    cluster: bool,
    timeout: Duration,
) -> Result<(Conn, u128)> {
    let target = Target::new(
        dsn,
        &RedisConnectOptions {
            cluster,
            tls_ca: None,
            connect_timeout: timeout,
            ..Default::default()
        },
    )?;
    let start = Instant::now();
    let what = format!("connect to {}", dsn.redacted);
    let conn = bounded(timeout, &what, target.command_connection(timeout), |e| {
        redis_error(&what, &e, &dsn.secrets)
    })
    .await?;
    Ok((conn, elapsed_ms(start)))
}

/// A Redis failure, secrets scrubbed.
pub fn redis_error(what: &str, err: &redis::RedisError, secrets: &[String]) -> Error {
    let kind = if err.is_io_error()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.kind() == redis::ErrorKind::AuthenticationFailed
    {
        ErrorKind::Connection
    } else {
        ErrorKind::Transport
    };
    Error::new(kind, format!("{what}: {err}"))
        .caused_by(crate::engines::redis::errors::cause(err))
        .redacted(secrets)
}

/// Runs one Redis command, bounded.
pub async fn redis_query(
    conn: &mut Conn,
    cmd: &redis::Cmd,
    what: &str,
    secrets: &[String],
) -> Result<redis::Value> {
    bounded(CHECK_STATEMENT_BOUND, what, cmd.query_async(conn), |e| {
        redis_error(what, &e, secrets)
    })
    .await
}
