//! SQLite, the embedded default: one file, no server. Same table and column names as the
//! other engines; times are UTC text `YYYY-MM-DD HH:MM:SS.SSS` from SQLite's own clock (text
//! of that shape sorts like time); WAL, a busy timeout, and one write transaction per claim,
//! so several processes can share a file. Idle consumers poll, and a send in this process
//! wakes this process's consumers at once.

use crate::targets::Targets;
use super::{
    driver_error, id_list, idle_wait, numeric_ids, row_id, with_transient_retry, Capabilities,
    Engine, Failure, NewMessage, QueueConfig, SqlWaits, StoredMessage,
};
use crate::dsn::{Dialect, SqlDsn};
use crate::error::{Error, Result};
use crate::wake::{WaitOutcome, WakeBoard, WakeSignal};
use futures_util::future::BoxFuture;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Row};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Where a `sqlite:` DSN points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqliteLocation {
    /// A file; relative paths are resolved against the working directory once, at construction.
    File(PathBuf),
    /// `sqlite://:memory:`: private to this process, shared by its transports on that DSN.
    Memory,
}

/// `sqlite://relative/path.db`, `sqlite:///absolute/path.db`, `sqlite:relative.db`,
/// `sqlite://:memory:`. A query string is not accepted (there is nothing to configure).
pub fn parse_sqlite_location(dsn: &str) -> Result<SqliteLocation> {
    let rest = dsn.split_once(':').map(|(_, rest)| rest).unwrap_or("");
    let path = rest.strip_prefix("//").unwrap_or(rest);
    if path.contains('?') || path.contains('#') {
        return Err(Error::connection(format!(
            "Invalid SQLite DSN \"{dsn}\": query strings and fragments are not supported; use sqlite://path/to/file.db."
        )));
    }
    if path.is_empty() {
        return Err(Error::connection(format!(
            "Invalid SQLite DSN \"{dsn}\": no file path; use sqlite://relative/file.db, sqlite:///absolute/file.db or sqlite://:memory:."
        )));
    }
    if path == ":memory:" {
        return Ok(SqliteLocation::Memory);
    }
    let path = PathBuf::from(path);
    let absolute = if path.is_absolute() {
        path
    } else {
        std::env::current_dir()
            .map_err(|e| {
                Error::connection(format!(
                    "Cannot resolve SQLite path \"{}\": {e}",
                    path.display()
                ))
            })?
            .join(path)
    };
    Ok(SqliteLocation::File(absolute))
}

struct SqliteShared {
    key: String,
    pool: SqlitePool,
    board: WakeBoard,
}

static TARGETS: LazyLock<Targets<SqliteShared>> = LazyLock::new(Targets::default);

impl SqliteShared {
    fn join(location: &SqliteLocation, busy_timeout: Duration) -> Result<Arc<Self>> {
        let key = match location {
            SqliteLocation::File(path) => path.display().to_string(),
            SqliteLocation::Memory => ":memory:".to_owned(),
        };
        TARGETS.join(&key.clone(), || {
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
                    SqliteConnectOptions::from_str(":memory:").map_err(|e| {
                        Error::connection(format!("Cannot open SQLite in memory: {e}"))
                    })?,
                    1,
                ),
            };
            let options = options
                .busy_timeout(busy_timeout)
                .disable_statement_logging();
            let pool = SqlitePoolOptions::new()
                .max_connections(4)
                // A ping before every use would double the round trips; a broken connection is
                // retried instead (see with_transient_retry).
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
            Ok(Self {
                key,
                pool,
                board: WakeBoard::default(),
            })
        })
    }
}

/// SQLite result codes: 5 BUSY, 6 LOCKED (and their extended forms), 14 CANTOPEN, 26 NOTADB.
fn classify(err: &sqlx::Error) -> Failure {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Failure::Connection,
        sqlx::Error::Database(db) => {
            if db.message().starts_with("no such table") {
                return Failure::NotFound;
            }
            let code: i64 = db.code().and_then(|c| c.parse().ok()).unwrap_or(0);
            match code & 0xff {
                5 | 6 => Failure::Transient,
                14 | 26 => Failure::Connection,
                _ => Failure::Other,
            }
        }
        _ => Failure::Other,
    }
}

const NOW: &str = "strftime('%Y-%m-%d %H:%M:%f', 'now')";

struct Statements {
    create_table: String,
    create_index: String,
    insert: String,
    claim: String,
    delete_head: String,
    redeliver_delete: String,
    release_head: String,
    keep_head: String,
    next_due: String,
    list: String,
    find: String,
    count: String,
}

impl Statements {
    fn new(t: &str) -> Self {
        let expired = "strftime('%Y-%m-%d %H:%M:%f', 'now', printf('-%.3f seconds', ?2))";
        let claimable =
            format!("queue_name = ?1 AND available_at <= {NOW} AND (delivered_at IS NULL OR delivered_at < {expired})");
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\n  id INTEGER PRIMARY KEY AUTOINCREMENT,\n  body TEXT NOT NULL,\n  headers TEXT NOT NULL,\n  queue_name VARCHAR(190) NOT NULL,\n  created_at TEXT NOT NULL,\n  available_at TEXT NOT NULL,\n  delivered_at TEXT NULL\n)"
            ),
            create_index: format!(
                "CREATE INDEX IF NOT EXISTS {t}_claim_idx ON {t} (queue_name, available_at, delivered_at, id)"
            ),
            insert: format!(
                "INSERT INTO {t} (queue_name, body, headers, created_at, available_at) VALUES \
                 (?1, ?2, ?3, {NOW}, strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', ?4 / 1000.0)))"
            ),
            claim: format!(
                "UPDATE {t} SET delivered_at = {NOW} WHERE id IN ( \
                   SELECT id FROM {t} WHERE {claimable} ORDER BY available_at, delivered_at, id LIMIT ?3 \
                 ) RETURNING CAST(id AS TEXT) AS id, body, headers, available_at"
            ),
            delete_head: format!("DELETE FROM {t} WHERE id IN "),
            redeliver_delete: format!("DELETE FROM {t} WHERE id = ?1"),
            release_head: format!("UPDATE {t} SET delivered_at = NULL WHERE id IN "),
            keep_head: format!("UPDATE {t} SET delivered_at = {NOW} WHERE delivered_at IS NOT NULL AND id IN "),
            next_due: format!(
                "SELECT (julianday(MIN(available_at)) - julianday('now')) * 86400000.0 AS wait_ms \
                 FROM {t} WHERE queue_name = ?1 AND (delivered_at IS NULL OR delivered_at < {expired})"
            ),
            list: format!(
                "SELECT CAST(id AS TEXT) AS id, body, headers FROM {t} WHERE queue_name = ?1 ORDER BY {t}.available_at, {t}.id LIMIT ?2"
            ),
            find: format!("SELECT CAST(id AS TEXT) AS id, body, headers FROM {t} WHERE id = ?1"),
            count: format!("SELECT COUNT(*) AS count FROM {t} WHERE {claimable}"),
        }
    }
}

pub struct SqliteQueue {
    shared: Arc<SqliteShared>,
    config: QueueConfig,
    sql: Statements,
    wake: Arc<WakeSignal>,
    secrets: Vec<String>,
}

impl SqliteQueue {
    pub fn open(dsn: &SqlDsn, config: QueueConfig) -> Result<Self> {
        let location = parse_sqlite_location(&dsn.driver_url)?;
        let shared = SqliteShared::join(&location, config.connect_timeout)?;
        let wake = shared.board.signal(&config.table, &config.queue);
        Ok(Self {
            sql: Statements::new(&config.table),
            shared,
            config,
            wake,
            secrets: dsn.secrets.clone(),
        })
    }

    async fn setup_once(&self) -> std::result::Result<(), sqlx::Error> {
        let mut tx = self.shared.pool.begin().await?;
        sqlx::query(&self.sql.create_table)
            .persistent(false)
            .execute(&mut *tx)
            .await?;
        sqlx::query(&self.sql.create_index)
            .persistent(false)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    /// Deletes the original and inserts the copy in one transaction; None if it was gone.
    async fn redeliver_once(
        &self,
        id: i64,
        copy: &NewMessage,
    ) -> std::result::Result<Option<String>, sqlx::Error> {
        let mut tx = self.shared.pool.begin().await?;
        let deleted = sqlx::query(&self.sql.redeliver_delete)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        if deleted.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(None);
        }
        let done = sqlx::query(&self.sql.insert)
            .bind(&self.config.queue)
            .bind(&copy.body)
            .bind(&copy.headers)
            .bind(copy.delay_ms)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(done.last_insert_rowid().to_string()))
    }

    fn err(&self, op: &str, e: sqlx::Error) -> Error {
        let detail = match &e {
            sqlx::Error::Database(db) => match db.code() {
                Some(code) => format!("{} (code {code})", db.message()),
                None => db.message().to_owned(),
            },
            other => other.to_string(),
        };
        driver_error(Dialect::Sqlite, op, classify(&e), &detail, &self.secrets)
    }
}

fn stored(row: &SqliteRow) -> std::result::Result<StoredMessage, sqlx::Error> {
    Ok(StoredMessage {
        id: row.try_get("id")?,
        body: row.try_get("body")?,
        headers: row.try_get("headers")?,
    })
}

impl SqlWaits for SqliteQueue {
    fn capabilities(&self) -> Capabilities {
        Capabilities { push_wakeup: false }
    }

    fn config(&self) -> &QueueConfig {
        &self.config
    }

    fn wake_signal(&self) -> Arc<WakeSignal> {
        self.wake.clone()
    }

    fn next_due_in_ms(&self) -> BoxFuture<'_, Result<Option<f64>>> {
        Box::pin(async move {
            let row = sqlx::query(&self.sql.next_due)
                .bind(&self.config.queue)
                .bind(self.config.redeliver_timeout_seconds)
                .fetch_one(&self.shared.pool)
                .await
                .map_err(|e| self.err("claim", e))?;
            row.try_get::<Option<f64>, _>("wait_ms")
                .map_err(|e| self.err("claim", e))
        })
    }

    fn push_ready(&self) -> BoxFuture<'_, bool> {
        Box::pin(async { false })
    }
}

impl Engine for SqliteQueue {
    fn wake_signal(&self) -> Arc<WakeSignal> {
        self.wake.clone()
    }

    fn setup(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            with_transient_retry(classify, || self.setup_once())
                .await
                .map_err(|e| self.err("setup", e))
        })
    }

    fn insert(&self, messages: Vec<NewMessage>) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let run = async {
                let mut tx = self.shared.pool.begin().await?;
                let mut ids = Vec::with_capacity(messages.len());
                for m in &messages {
                    let done = sqlx::query(&self.sql.insert)
                        .bind(&self.config.queue)
                        .bind(&m.body)
                        .bind(&m.headers)
                        .bind(m.delay_ms)
                        .execute(&mut *tx)
                        .await?;
                    ids.push(done.last_insert_rowid().to_string());
                }
                tx.commit().await?;
                Ok::<_, sqlx::Error>(ids)
            };
            run.await.map_err(|e| self.err("send", e))
        })
    }

    fn claim(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(async move {
            let rows = with_transient_retry(classify, || {
                sqlx::query(&self.sql.claim)
                    .bind(&self.config.queue)
                    .bind(self.config.redeliver_timeout_seconds)
                    .bind(i64::from(limit))
                    .fetch_all(&self.shared.pool)
            })
            .await
            .map_err(|e| self.err("claim", e))?;
            let mut claimed = Vec::with_capacity(rows.len());
            for row in &rows {
                let available_at: String = row
                    .try_get("available_at")
                    .map_err(|e| self.err("claim", e))?;
                let message = stored(row).map_err(|e| self.err("claim", e))?;
                let id: i64 = message.id.parse().unwrap_or(i64::MAX);
                claimed.push((available_at, id, message));
            }
            // RETURNING has no defined order: restore the claim order.
            claimed.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
            Ok(claimed.into_iter().map(|(_, _, m)| m).collect())
        })
    }

    fn idle<'a>(
        &'a self,
        seen: u64,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<WaitOutcome>> {
        Box::pin(idle_wait(self, seen, cancel))
    }

    fn keep_claimed(&self, ids: Vec<String>) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let ids = numeric_ids(&ids);
            if ids.is_empty() {
                return Ok(());
            }
            let sql = format!("{}{}", self.sql.keep_head, id_list(&ids));
            sqlx::raw_sql(&sql)
                .execute(&self.shared.pool)
                .await
                .map_err(|e| self.err("claim", e))?;
            Ok(())
        })
    }

    fn claim_lease(&self) -> Duration {
        Duration::from_secs_f64(self.config.redeliver_timeout_seconds)
    }

    fn delete(&self, ids: Vec<String>) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let ids = numeric_ids(&ids);
            let sql = format!("{}{}", self.sql.delete_head, id_list(&ids));
            with_transient_retry(classify, || sqlx::raw_sql(&sql).execute(&self.shared.pool))
                .await
                .map_err(|e| self.err("ack", e))?;
            Ok(())
        })
    }

    fn redeliver(&self, id: String, copy: NewMessage) -> BoxFuture<'_, Result<Option<String>>> {
        Box::pin(async move {
            let Some(id) = row_id(&id) else {
                return Ok(None);
            };
            with_transient_retry(classify, || self.redeliver_once(id, &copy))
                .await
                .map_err(|e| self.err("reject", e))
        })
    }

    fn release(&self, ids: Vec<String>) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let ids = numeric_ids(&ids);
            let sql = format!("{}{}", self.sql.release_head, id_list(&ids));
            with_transient_retry(classify, || sqlx::raw_sql(&sql).execute(&self.shared.pool))
                .await
                .map_err(|e| self.err("release", e))?;
            Ok(())
        })
    }

    fn list(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(async move {
            let rows = sqlx::query(&self.sql.list)
                .bind(&self.config.queue)
                .bind(i64::from(limit))
                .fetch_all(&self.shared.pool)
                .await
                .map_err(|e| self.err("list", e))?;
            rows.iter()
                .map(stored)
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| self.err("list", e))
        })
    }

    fn find(&self, id: String) -> BoxFuture<'_, Result<Option<StoredMessage>>> {
        Box::pin(async move {
            let Some(id) = row_id(&id) else {
                return Ok(None);
            };
            let row = sqlx::query(&self.sql.find)
                .bind(id)
                .fetch_optional(&self.shared.pool)
                .await
                .map_err(|e| self.err("find", e))?;
            row.as_ref()
                .map(stored)
                .transpose()
                .map_err(|e| self.err("find", e))
        })
    }

    fn count(&self) -> BoxFuture<'_, Result<i64>> {
        Box::pin(async move {
            let row = sqlx::query(&self.sql.count)
                .bind(&self.config.queue)
                .bind(self.config.redeliver_timeout_seconds)
                .fetch_one(&self.shared.pool)
                .await
                .map_err(|e| self.err("count", e))?;
            row.try_get::<i64, _>("count")
                .map_err(|e| self.err("count", e))
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if TARGETS.leave(&self.shared.key, &self.shared) {
                tokio::time::timeout(Duration::from_secs(2), self.shared.pool.close())
                    .await
                    .ok();
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dsn_forms() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            parse_sqlite_location("sqlite://queue.db").unwrap(),
            SqliteLocation::File(cwd.join("queue.db"))
        );
        assert_eq!(
            parse_sqlite_location("sqlite:queue.db").unwrap(),
            SqliteLocation::File(cwd.join("queue.db"))
        );
        assert_eq!(
            parse_sqlite_location("sqlite://data/q.db").unwrap(),
            SqliteLocation::File(cwd.join("data/q.db"))
        );
        assert_eq!(
            parse_sqlite_location("sqlite:///var/lib/app/q.db").unwrap(),
            SqliteLocation::File(PathBuf::from("/var/lib/app/q.db"))
        );
        assert_eq!(
            parse_sqlite_location("sqlite://:memory:").unwrap(),
            SqliteLocation::Memory
        );
        assert!(parse_sqlite_location("sqlite://").is_err());
        assert!(parse_sqlite_location("sqlite://q.db?mode=ro").is_err());
    }

    #[test]
    fn claim_is_one_statement() {
        let sql = Statements::new("t");
        assert!(sql.claim.starts_with("UPDATE t SET delivered_at"));
        assert!(sql.claim.contains("RETURNING"));
        assert!(sql
            .create_index
            .contains("t_claim_idx ON t (queue_name, available_at, delivered_at, id)"));
    }
    #[test]
    fn listing_orders_by_the_numeric_id_not_its_text_alias() {
        let sql = Statements::new("t");
        assert!(
            sql.list.contains("ORDER BY t.available_at, t.id"),
            "{}",
            sql.list
        );
    }
    #[test]
    fn claims_in_the_claim_index_order_so_no_claim_sorts_the_queue() {
        let sql = Statements::new("t");
        assert!(
            sql.claim.contains("available_at, delivered_at, id LIMIT"),
            "{}",
            sql.claim
        );
    }
}
