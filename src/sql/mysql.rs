//! MySQL 8 / MariaDB ≥ 10.6: the upstream table (LONGTEXT, utf8mb4, inline index), batch
//! claims with `FOR UPDATE SKIP LOCKED` in one short transaction, `NOW(3)` in the server's
//! own session time zone (never changed, so TypeScript and native workers read each other's
//! DATETIMEs alike), and polling plus in-process wake-ups for idle consumers.

use crate::targets::{FirstContact, Targets};
use super::{
    driver_error, id_list, idle_wait, no_answer, numeric_ids, row_id, with_transient_retry,
    Capabilities, Engine, Failure, NewMessage, QueueConfig, SqlWaits, StoredMessage,
};
use crate::dsn::{Dialect, SqlDsn};
use crate::error::{Error, Result};
use crate::wake::{WaitOutcome, WakeBoard, WakeSignal};
use futures_util::future::BoxFuture;
use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPool, MySqlPoolOptions, MySqlRow};
use sqlx::{ConnectOptions, Connection, Row};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Leave room for the statement text and protocol framing in `max_allowed_packet`.
const PACKET_HEADROOM: u64 = 64 * 1024;

struct MySqlShared {
    key: String,
    pool: MySqlPool,
    options: MySqlConnectOptions,
    connect_timeout: Duration,
    secrets: Vec<String>,
    board: WakeBoard,
    first_contact: FirstContact,
    /// Read on first contact: the server's `max_allowed_packet` and `auto_increment_increment`.
    max_packet: AtomicU64,
    id_step: AtomicU64,
}

static TARGETS: LazyLock<Targets<MySqlShared>> = LazyLock::new(Targets::default);

impl MySqlShared {
    fn join(dsn: &SqlDsn, connect_timeout: Duration) -> Result<Arc<Self>> {
        TARGETS.join(&dsn.driver_url, || Self::open(dsn, connect_timeout))
    }

    fn open(dsn: &SqlDsn, connect_timeout: Duration) -> Result<Self> {
        let options = MySqlConnectOptions::from_str(&dsn.driver_url)
            .map_err(|e| {
                Error::connection(format!("Invalid SQL DSN \"{}\": {e}", dsn.redacted))
                    .redacted(&dsn.secrets)
            })?
            // Keep the server's session defaults (time zone above all): see the module doc.
            .timezone(None)
            .pipes_as_concat(false)
            .no_engine_substitution(false)
            .charset("utf8mb4")
            .disable_statement_logging();
        let pool = MySqlPoolOptions::new()
            .max_connections(super::MAX_POOL_CONNECTIONS)
            // A ping before every use would double the round trips; a broken connection is
            // retried instead (see with_transient_retry).
            .test_before_acquire(false)
            .min_connections(0)
            .acquire_timeout(connect_timeout)
            .idle_timeout(Duration::from_secs(60))
            // READ COMMITTED: a claim's UPDATE … WHERE id IN (…) may scan the primary key;
            // under REPEATABLE READ that locks every row it passes (other queues, rows being
            // inserted by other sessions) until commit, stalling claims and deadlocking sends.
            // Under READ COMMITTED rows that do not match are not locked. (The time zone is
            // left alone: see the module doc.)
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    sqlx::Executor::execute(
                        &mut *conn,
                        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                    )
                    .await
                    .map(|_| ())
                })
            })
            .connect_lazy_with(options.clone());
        Ok(Self {
            key: dsn.driver_url.clone(),
            pool,
            options,
            connect_timeout,
            secrets: dsn.secrets.clone(),
            board: WakeBoard::default(),
            first_contact: FirstContact::default(),
            max_packet: AtomicU64::new(16 * 1024 * 1024),
            id_step: AtomicU64::new(1),
        })
    }

    /// First contact also checks the server version (SKIP LOCKED needs MySQL 8.0.1 or
    /// MariaDB 10.6) and reads the settings batching depends on.
    async fn ensure_reachable(&self, op: &str) -> Result<()> {
        self.first_contact
            .ensure(|| async {
                let mut conn = match tokio::time::timeout(self.connect_timeout, self.options.connect()).await {
                    Ok(Ok(conn)) => conn,
                    Ok(Err(err)) => return Err(self.error(op, &err)),
                    Err(_) => return Err(no_answer(Dialect::MySql, op, self.connect_timeout, &self.secrets)),
                };
                let row = sqlx::query(
                    "SELECT VERSION() AS version, CAST(@@max_allowed_packet AS UNSIGNED) AS max_packet, \
                     CAST(@@auto_increment_increment AS UNSIGNED) AS id_step",
                )
                .fetch_one(&mut conn)
                .await
                .map_err(|e| self.error(op, &e))?;
                let _ = conn.close().await;
                let version: String = row.try_get("version").map_err(|e| self.error(op, &e))?;
                check_server_version(&version)?;
                let max_packet: u64 = row.try_get("max_packet").map_err(|e| self.error(op, &e))?;
                let id_step: u64 = row.try_get("id_step").map_err(|e| self.error(op, &e))?;
                self.max_packet.store(max_packet, Ordering::Relaxed);
                self.id_step.store(id_step.max(1), Ordering::Relaxed);
                Ok(())
            })
            .await
    }

    fn error(&self, op: &str, err: &sqlx::Error) -> Error {
        let detail = match err {
            sqlx::Error::PoolTimedOut => format!(
                "no connection could be obtained within {} ms (server unreachable or pool exhausted)",
                self.connect_timeout.as_millis()
            ),
            sqlx::Error::Database(db) => match db.try_downcast_ref::<MySqlDatabaseError>() {
                Some(my) if my.number() == ER_NET_PACKET_TOO_LARGE => format!(
                    "{} (the statement exceeded the server's max_allowed_packet; raise max_allowed_packet)",
                    my.message()
                ),
                Some(my) => format!("{} (error {})", my.message(), my.number()),
                None => db.message().to_owned(),
            },
            other => other.to_string(),
        };
        driver_error(Dialect::MySql, op, classify(err), &detail, &self.secrets)
    }
}

const ER_DBACCESS_DENIED_ERROR: u16 = 1044;
const ER_ACCESS_DENIED_ERROR: u16 = 1045;
const ER_BAD_DB_ERROR: u16 = 1049;
const ER_NET_PACKET_TOO_LARGE: u16 = 1153;
const ER_NO_SUCH_TABLE: u16 = 1146;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_SERVER_SHUTDOWN: u16 = 1053;
const ER_CON_COUNT_ERROR: u16 = 1040;

fn classify(err: &sqlx::Error) -> Failure {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Failure::Connection,
        sqlx::Error::Database(db) => match db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(|e| e.number())
        {
            Some(ER_NO_SUCH_TABLE) => Failure::NotFound,
            Some(ER_LOCK_DEADLOCK | ER_LOCK_WAIT_TIMEOUT) => Failure::Transient,
            Some(
                ER_ACCESS_DENIED_ERROR
                | ER_DBACCESS_DENIED_ERROR
                | ER_BAD_DB_ERROR
                | ER_SERVER_SHUTDOWN
                | ER_CON_COUNT_ERROR,
            ) => Failure::Connection,
            _ => Failure::Other,
        },
        _ => Failure::Other,
    }
}

/// Fails unless the server has `FOR UPDATE SKIP LOCKED`: MySQL ≥ 8.0.1, MariaDB ≥ 10.6.
fn check_server_version(version: &str) -> Result<()> {
    let mariadb = version.to_ascii_lowercase().contains("mariadb");
    let numbers: Vec<u32> = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|part| !part.is_empty())
        .take(3)
        .filter_map(|part| part.parse().ok())
        .collect();
    let found = (
        numbers.first().copied().unwrap_or(0),
        numbers.get(1).copied().unwrap_or(0),
        numbers.get(2).copied().unwrap_or(0),
    );
    let (minimum, name) = if mariadb {
        ((10, 6, 0), "MariaDB 10.6")
    } else {
        ((8, 0, 1), "MySQL 8.0.1")
    };
    if found >= minimum {
        Ok(())
    } else {
        Err(Error::connection(format!(
            "MySQL transport needs FOR UPDATE SKIP LOCKED, which this server ({version}) lacks: the minimum is {name}."
        )))
    }
}

struct Statements {
    create_table: String,
    claim_select: String,
    insert_row: &'static str,
    insert_head: String,
    insert_one: String,
    mark_delivered_head: String,
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
        let claimable = "queue_name = ? AND available_at <= NOW(3) \
             AND (delivered_at IS NULL OR delivered_at < NOW(3) - INTERVAL ? SECOND)";
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\n  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,\n  body LONGTEXT NOT NULL,\n  headers LONGTEXT NOT NULL,\n  queue_name VARCHAR(190) NOT NULL,\n  created_at DATETIME(3) NOT NULL,\n  available_at DATETIME(3) NOT NULL,\n  delivered_at DATETIME(3) NULL,\n  INDEX {t}_claim_idx (queue_name, available_at, delivered_at, id)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci"
            ),
            claim_select: format!(
                "SELECT CAST(id AS CHAR) AS id, body, headers FROM {t} WHERE {claimable} \
                 ORDER BY {t}.available_at, {t}.delivered_at, {t}.id LIMIT ? FOR UPDATE SKIP LOCKED"
            ),
            insert_row: "(?, ?, ?, NOW(3), NOW(3) + INTERVAL ? MICROSECOND)",
            insert_head: format!("INSERT INTO {t} (queue_name, body, headers, created_at, available_at) VALUES "),
            insert_one: format!(
                "INSERT INTO {t} (queue_name, body, headers, created_at, available_at) VALUES (?, ?, ?, NOW(3), NOW(3) + INTERVAL ? MICROSECOND)"
            ),
            mark_delivered_head: format!("UPDATE {t} SET delivered_at = NOW(3) WHERE id IN "),
            delete_head: format!("DELETE FROM {t} WHERE id IN "),
            redeliver_delete: format!("DELETE FROM {t} WHERE id = ?"),
            release_head: format!("UPDATE {t} SET delivered_at = NULL WHERE id IN "),
            keep_head: format!("UPDATE {t} SET delivered_at = NOW(3) WHERE delivered_at IS NOT NULL AND id IN "),
            next_due: format!(
                "SELECT TIMESTAMPDIFF(MICROSECOND, NOW(3), MIN(available_at)) / 1000e0 AS wait_ms \
                 FROM {t} WHERE queue_name = ? \
                 AND (delivered_at IS NULL OR delivered_at < NOW(3) - INTERVAL ? SECOND)"
            ),
            list: format!(
                "SELECT CAST(id AS CHAR) AS id, body, headers FROM {t} WHERE queue_name = ? ORDER BY {t}.available_at, {t}.id LIMIT ?"
            ),
            find: format!("SELECT CAST(id AS CHAR) AS id, body, headers FROM {t} WHERE id = ?"),
            count: format!("SELECT COUNT(*) AS count FROM {t} WHERE {claimable}"),
        }
    }

    /// `INSERT … VALUES (…), (…)` for `rows` messages.
    fn insert(&self, rows: usize) -> String {
        let mut sql =
            String::with_capacity(self.insert_head.len() + rows * (self.insert_row.len() + 2));
        sql.push_str(&self.insert_head);
        for i in 0..rows {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(self.insert_row);
        }
        sql
    }
}

pub struct MySqlQueue {
    shared: Arc<MySqlShared>,
    config: QueueConfig,
    sql: Statements,
    wake: Arc<WakeSignal>,
}

impl MySqlQueue {
    pub fn open(dsn: &SqlDsn, config: QueueConfig) -> Result<Self> {
        let shared = MySqlShared::join(dsn, config.connect_timeout)?;
        let wake = shared.board.signal(&config.table, &config.queue);
        Ok(Self {
            sql: Statements::new(&config.table),
            shared,
            config,
            wake,
        })
    }

    fn err(&self, op: &str, e: sqlx::Error) -> Error {
        self.shared.error(op, &e)
    }

    async fn ready(&self, op: &str) -> Result<()> {
        self.shared.ensure_reachable(op).await
    }

    /// One claim transaction: lock a batch with SKIP LOCKED, mark it delivered, commit.
    async fn claim_once(&self, limit: u32) -> std::result::Result<Vec<StoredMessage>, sqlx::Error> {
        let mut tx = self.shared.pool.begin().await?;
        let rows = sqlx::query(&self.sql.claim_select)
            .bind(&self.config.queue)
            .bind(self.config.redeliver_timeout_seconds)
            .bind(i64::from(limit))
            .fetch_all(&mut *tx)
            .await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            claimed.push(stored(row)?);
        }
        if !claimed.is_empty() {
            let ids: Vec<i64> = claimed.iter().filter_map(|m| m.id.parse().ok()).collect();
            let sql = format!("{}{}", self.sql.mark_delivered_head, id_list(&ids));
            sqlx::query(&sql)
                .persistent(false)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(claimed)
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
        let done = sqlx::query(&self.sql.insert_one)
            .bind(&self.config.queue)
            .bind(&copy.body)
            .bind(&copy.headers)
            .bind((copy.delay_ms * 1000.0).round() as i64)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(done.last_insert_id().to_string()))
    }

    /// One attempt at storing a batch: one autocommit statement when it fits one packet,
    /// else one transaction over several (a send never half-succeeds).
    async fn insert_once(
        &self,
        messages: &[NewMessage],
        ranges: &[std::ops::Range<usize>],
        step: u64,
    ) -> std::result::Result<Vec<String>, sqlx::Error> {
        let ids_of =
            |first: u64, rows: usize| (0..rows as u64).map(move |i| (first + i * step).to_string());
        let mut ids = Vec::with_capacity(messages.len());
        if let [range] = ranges {
            let chunk = &messages[range.clone()];
            let sql = self.sql.insert(chunk.len());
            let done = self
                .bind_rows(&sql, chunk)
                .execute(&self.shared.pool)
                .await?;
            ids.extend(ids_of(done.last_insert_id(), chunk.len()));
            return Ok(ids);
        }
        let mut tx = self.shared.pool.begin().await?;
        for range in ranges {
            let chunk = &messages[range.clone()];
            let sql = self.sql.insert(chunk.len());
            let done = self.bind_rows(&sql, chunk).execute(&mut *tx).await?;
            ids.extend(ids_of(done.last_insert_id(), chunk.len()));
        }
        tx.commit().await?;
        Ok(ids)
    }

    /// The multi-row INSERT for `chunk`. A multi-row insert gets consecutive ids from the first
    /// one (InnoDB allocates a simple insert's values at once), spaced by the increment.
    fn bind_rows<'q>(
        &'q self,
        sql: &'q str,
        chunk: &'q [NewMessage],
    ) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
        let mut query = sqlx::query(sql).persistent(chunk.len() <= 8);
        for m in chunk {
            query = query
                .bind(&self.config.queue)
                .bind(&m.body)
                .bind(&m.headers)
                .bind((m.delay_ms * 1000.0).round() as i64);
        }
        query
    }

    /// Splits a batch so that no statement exceeds `max_allowed_packet`; a single message that
    /// cannot fit is refused before anything is written.
    fn packets(&self, messages: &[NewMessage]) -> Result<Vec<std::ops::Range<usize>>> {
        let limit = self
            .shared
            .max_packet
            .load(Ordering::Relaxed)
            .saturating_sub(PACKET_HEADROOM)
            .max(1024);
        let mut ranges = Vec::new();
        let (mut start, mut size) = (0usize, 0u64);
        for (i, m) in messages.iter().enumerate() {
            // Bound as a prepared statement, strings travel unescaped with a length prefix.
            let bytes = (m.body.len() + m.headers.len() + self.config.queue.len() + 64) as u64;
            if bytes > limit {
                return Err(Error::transport(format!(
                    "MySQL transport failed during \"send\": a message of {bytes} bytes does not fit the server's max_allowed_packet ({} bytes); raise max_allowed_packet on the server.",
                    self.shared.max_packet.load(Ordering::Relaxed)
                )));
            }
            if size + bytes > limit && i > start {
                ranges.push(start..i);
                start = i;
                size = 0;
            }
            size += bytes;
        }
        if start < messages.len() {
            ranges.push(start..messages.len());
        }
        Ok(ranges)
    }
}

fn stored(row: &MySqlRow) -> std::result::Result<StoredMessage, sqlx::Error> {
    Ok(StoredMessage {
        id: row.try_get("id")?,
        body: row.try_get("body")?,
        headers: row.try_get("headers")?,
    })
}

impl SqlWaits for MySqlQueue {
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

impl Engine for MySqlQueue {
    fn wake_signal(&self) -> Arc<WakeSignal> {
        self.wake.clone()
    }

    fn setup(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.ready("setup").await?;
            sqlx::raw_sql(&self.sql.create_table)
                .execute(&self.shared.pool)
                .await
                .map_err(|e| self.err("setup", e))?;
            Ok(())
        })
    }

    fn check_message(&self, message: &NewMessage) -> Result<()> {
        // The server's limit is known once it answered; before that, the batch check decides.
        if self.shared.first_contact.reached() {
            self.packets(std::slice::from_ref(message))?;
        }
        Ok(())
    }

    fn insert(&self, messages: Vec<NewMessage>) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            self.ready("send").await?;
            let ranges = self.packets(&messages)?;
            let step = self.shared.id_step.load(Ordering::Relaxed);
            with_transient_retry(classify, || self.insert_once(&messages, &ranges, step))
                .await
                .map_err(|e| self.err("send", e))
        })
    }

    fn claim(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(async move {
            self.ready("claim").await?;
            let rows = with_transient_retry(classify, || self.claim_once(limit))
                .await
                .map_err(|e| self.err("claim", e))?;
            Ok(rows)
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
            sqlx::raw_sql(&sql)
                .execute(&self.shared.pool)
                .await
                .map_err(|e| self.err("release", e))?;
            Ok(())
        })
    }

    fn list(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(async move {
            self.ready("list").await?;
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
            self.ready("find").await?;
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
            self.ready("count").await?;
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
    fn ddl_is_upstreams() {
        let sql = Statements::new("messenger_messages");
        assert!(sql.create_table.starts_with("CREATE TABLE IF NOT EXISTS messenger_messages (\n  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,"));
        assert!(sql
            .create_table
            .contains("created_at DATETIME(3) NOT NULL,\n"));
        assert!(sql.create_table.contains(
            "INDEX messenger_messages_claim_idx (queue_name, available_at, delivered_at, id)"
        ));
        assert!(sql
            .create_table
            .ends_with(") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci"));
        assert!(sql.claim_select.contains("FOR UPDATE SKIP LOCKED"));
    }

    #[test]
    fn multi_row_insert_has_one_group_per_row() {
        let sql = Statements::new("t");
        let three = sql.insert(3);
        assert_eq!(three.matches("NOW(3) + INTERVAL ? MICROSECOND").count(), 3);
        assert_eq!(three.matches('?').count(), 12);
    }

    #[test]
    fn id_lists_are_plain_integers() {
        assert_eq!(id_list(&[1, 22, 333]), "(1,22,333)");
    }

    #[test]
    fn server_versions() {
        assert!(check_server_version("10.11.19-MariaDB-0+deb12u1").is_ok());
        assert!(check_server_version("10.6.0-MariaDB").is_ok());
        assert!(check_server_version("8.0.1").is_ok());
        assert!(check_server_version("8.4.3").is_ok());
        let old_maria = check_server_version("10.5.23-MariaDB").unwrap_err();
        assert!(
            old_maria.message.contains("MariaDB 10.6"),
            "{}",
            old_maria.message
        );
        let old_mysql = check_server_version("5.7.44-log").unwrap_err();
        assert!(
            old_mysql.message.contains("MySQL 8.0.1"),
            "{}",
            old_mysql.message
        );
        assert!(check_server_version("8.0.0").is_err());
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
            sql.claim_select
                .contains("t.available_at, t.delivered_at, t.id LIMIT"),
            "{}",
            sql.claim_select
        );
    }
}
