//! SQLite, the embedded default: one file, no server. WAL, a busy timeout, and one write
//! transaction per claim, so several processes can share a file. Idle consumers poll; a send
//! in this process wakes this process's consumers at once, and another process's commit wakes
//! their poll as the file changes (`file_watch`).

mod errors;
mod file_watch;
mod location;
mod statements;

pub use location::{parse_sqlite_location, SqliteLocation};

use crate::engines::sql::claim_doubt::ClaimAttempt;
use crate::engines::sql::connector::{Connector, DialectFacts, OpenedTarget, TableStatements};
use crate::engines::sql::dialect::{renew_returning, SqlDialect};
use crate::engines::sql::driver::{Driver, SqlResult};
use crate::engines::sql::errors::Failure;
use crate::engines::sql::ids::HeldRow;
use crate::engines::sql::queue_context::QueueContext;
use crate::engines::sql::target::{pool_share, SqlTarget};
use crate::queue::engine::{Held, NewMessage, StoredMessage};
use crate::queue::wake::WakeBoard;
use crate::support::dsn::SqlDsn;
use crate::support::error::{Error, Result};
use crate::support::targets::Targets;
use futures_util::future::BoxFuture;
use sqlx::error::DatabaseError;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Row};
use statements::SqliteStatements;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

pub struct Sqlite;

static TARGETS: LazyLock<Targets<SqlTarget<Sqlite>>> = LazyLock::new(Targets::default);

impl Connector for Sqlite {
    type Db = sqlx::Sqlite;
    /// The watch of the database file (none in memory, or where the platform has none).
    type Extra = Option<file_watch::FileWatch>;
    type Statements = SqliteStatements;

    const FACTS: DialectFacts = DialectFacts {
        name: "sqlite",
        label: "SQLite",
        push_wakeup: false,
        shared_poll: true,
        has_server: false,
    };
    const TOKEN_OF: &'static str = statements::TOKEN_OF;
    /// A file's connections: one writer at a time, the others reading.
    const DEFAULT_MAX_CONNECTIONS: u32 = 4;

    /// The file alone: every transport on a file (or on `:memory:`, which must stay one
    /// database) shares one pool, with the first one's busy timeout.
    fn target_key(dsn: &SqlDsn, _busy_timeout: Duration) -> Result<String> {
        Ok(parse_sqlite_location(&dsn.driver_url)?.key())
    }

    /// `connect_timeout` is the busy timeout: how long a statement waits for another
    /// connection's write lock.
    fn open_target(
        dsn: &SqlDsn,
        busy_timeout: Duration,
        _board: &Arc<WakeBoard>,
        max_connections: u32,
    ) -> Result<OpenedTarget<Self>> {
        let pool_max = pool_share(max_connections, 0, "")?;
        let changed_elsewhere = Arc::<crate::queue::wake::WakeSignal>::default();
        let location = parse_sqlite_location(&dsn.driver_url)?;
        let watch = match &location {
            SqliteLocation::File(path) => file_watch::watch(path, changed_elsewhere.clone()),
            SqliteLocation::Memory => None,
        };
        let (options, min_connections) = match location {
            SqliteLocation::File(path) => (
                SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal),
                0,
            ),
            // sqlx names each parsed `:memory:` database uniquely in shared-cache mode, so
            // every connection of this pool opens the same one; it lives while one of them
            // is open.
            SqliteLocation::Memory => (
                SqliteConnectOptions::from_str(":memory:")
                    .map_err(|e| Error::connection(format!("Cannot open SQLite in memory: {e}")))?,
                1,
            ),
        };
        // SQLite takes its busy timeout in milliseconds as a C int.
        let busy_timeout = busy_timeout.min(Duration::from_millis(i32::MAX as u64));
        let options = options
            .busy_timeout(busy_timeout)
            .disable_statement_logging();
        let pool = SqlitePoolOptions::new()
            .max_connections(pool_max)
            // A ping before every use would double the round trips; a broken connection is
            // retried instead (see `retry`).
            .test_before_acquire(false)
            .min_connections(min_connections)
            .acquire_timeout(busy_timeout.max(Duration::from_secs(1)))
            .idle_timeout(if min_connections > 0 {
                None
            } else {
                Some(Duration::from_secs(60))
            })
            .max_lifetime(None)
            .connect_lazy_with(options);
        Ok(OpenedTarget {
            pool,
            // A file takes writes or fails: it is never a demoted writer.
            epoch: Arc::default(),
            extra: watch,
            changed_elsewhere,
        })
    }

    fn statements(table: &str, _notify: bool) -> (TableStatements, SqliteStatements) {
        statements::statements(table)
    }

    fn due_by_queue(table: &str) -> String {
        statements::due_by_queue(table)
    }

    fn classify_database(err: &dyn DatabaseError) -> Failure {
        errors::classify_database(err)
    }

    fn describe(err: &dyn DatabaseError) -> String {
        errors::describe(err)
    }

    fn database_cause(err: &dyn DatabaseError) -> crate::support::error::Cause {
        errors::cause(err)
    }
}

impl SqlDialect for Sqlite {
    fn targets() -> &'static Targets<SqlTarget<Self>> {
        &TARGETS
    }

    /// One write transaction for the batch.
    fn insert(
        queue: &QueueContext<Self>,
        messages: Vec<NewMessage>,
    ) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let run = async {
                let mut tx = queue.target.pool.begin().await?;
                let mut ids = Vec::with_capacity(messages.len());
                for m in &messages {
                    ids.push(insert_one(queue, &mut tx, m).await?);
                }
                tx.commit().await?;
                Ok::<_, sqlx::Error>(ids)
            };
            run.await.map_err(|e| queue.err("send", e))
        })
    }

    /// One `UPDATE … RETURNING` statement (a write transaction of its own).
    fn claim<'a>(
        queue: &'a QueueContext<Self>,
        limit: u32,
        _attempt: &'a mut ClaimAttempt,
    ) -> BoxFuture<'a, SqlResult<Vec<StoredMessage>>> {
        Box::pin(async move {
            let rows = sqlx::query(&queue.sql.claim)
                .bind(&queue.config.queue)
                .bind(queue.config.redeliver_timeout_seconds)
                .bind(i64::from(limit))
                .fetch_all(&queue.target.pool)
                .await?;
            let mut claimed = Vec::with_capacity(rows.len());
            for row in &rows {
                let available_at: String = row.try_get("available_at")?;
                let message = sqlx::Sqlite::claimed_of(row)?;
                let id: i64 = message.id.parse().unwrap_or(i64::MAX);
                claimed.push((available_at, id, message));
            }
            // RETURNING has no defined order: restore the claim order.
            claimed.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
            Ok(claimed.into_iter().map(|(_, _, m)| m).collect())
        })
    }

    /// Deletes the original and inserts the copy in one transaction.
    fn redeliver<'a>(
        queue: &'a QueueContext<Self>,
        id: i64,
        token: Option<i64>,
        copy: &'a NewMessage,
    ) -> BoxFuture<'a, SqlResult<Option<String>>> {
        Box::pin(async move {
            let mut tx = queue.target.pool.begin().await?;
            let deleted = sqlx::query(&queue.sql.redeliver_delete)
                .bind(id)
                .bind(token)
                .execute(&mut *tx)
                .await?;
            if deleted.rows_affected() == 0 {
                tx.rollback().await?;
                return Ok(None);
            }
            let id = insert_one(queue, &mut tx, copy).await?;
            tx.commit().await?;
            Ok(Some(id))
        })
    }

    fn release(queue: &QueueContext<Self>, condition: String) -> BoxFuture<'_, SqlResult<()>> {
        let sql = format!("{}{condition}", queue.sql.release_head);
        sqlx::Sqlite::execute_text(&queue.target.pool, sql)
    }

    fn renew(
        queue: &QueueContext<Self>,
        rows: Vec<HeldRow>,
    ) -> BoxFuture<'_, SqlResult<Vec<Held>>> {
        renew_returning(queue, &queue.sql.renew_head, &rows)
    }
}

/// Inserts `message` into the queue's table inside `tx`; returns its id.
async fn insert_one(
    queue: &QueueContext<Sqlite>,
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    message: &NewMessage,
) -> SqlResult<String> {
    let done = sqlx::query(&queue.sql.insert)
        .bind(&queue.config.queue)
        .bind(&message.body)
        .bind(&message.headers)
        .bind(message.delay_ms)
        .execute(&mut **tx)
        .await?;
    Ok(done.last_insert_rowid().to_string())
}
