//! PostgreSQL: the upstream table, batch claims with `FOR UPDATE SKIP LOCKED`, NOTIFY on every
//! insert (channel = table, payload = queue), one pool and one listener per process and DSN.

use super::pg_listener::PgNotifyListener;
use crate::targets::{FirstContact, Targets};
use super::{
    driver_error, id_list, idle_wait, no_answer, numeric_ids, row_id, with_transient_retry,
    Capabilities, Engine, Failure, NewMessage, QueueConfig, SqlWaits, StoredMessage,
};
use crate::dsn::{Dialect, SqlDsn};
use crate::error::{Error, Result};
use crate::wake::{WaitOutcome, WakeBoard, WakeSignal};
use futures_util::future::BoxFuture;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{ConnectOptions, Connection, Row};
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The connection target shared by every queue of the process on one DSN.
struct PgShared {
    key: String,
    pool: PgPool,
    options: PgConnectOptions,
    connect_timeout: Duration,
    secrets: Vec<String>,
    board: Arc<WakeBoard>,
    listener: Arc<PgNotifyListener>,
    first_contact: FirstContact,
}

static TARGETS: LazyLock<Targets<PgShared>> = LazyLock::new(Targets::default);

impl PgShared {
    fn join(dsn: &SqlDsn, connect_timeout: Duration) -> Result<Arc<Self>> {
        TARGETS.join(&dsn.driver_url, || Self::open(dsn, connect_timeout))
    }

    fn open(dsn: &SqlDsn, connect_timeout: Duration) -> Result<Self> {
        let options = PgConnectOptions::from_str(&dsn.driver_url)
            .map_err(|e| {
                Error::connection(format!("Invalid SQL DSN \"{}\": {e}", dsn.redacted))
                    .redacted(&dsn.secrets)
            })?
            .disable_statement_logging();
        let pool = PgPoolOptions::new()
            .max_connections(super::MAX_POOL_CONNECTIONS)
            // A ping before every use would double the round trips; a broken connection is
            // retried instead (see with_transient_retry).
            .test_before_acquire(false)
            .min_connections(0)
            .acquire_timeout(connect_timeout)
            .idle_timeout(Duration::from_secs(60))
            .connect_lazy_with(options.clone());
        let listener_pool = PgPoolOptions::new()
            .max_connections(1)
            // A ping before every use would double the round trips; a broken connection is
            // retried instead (see with_transient_retry).
            .test_before_acquire(false)
            .acquire_timeout(connect_timeout)
            .idle_timeout(None)
            .connect_lazy_with(options.clone());
        let board = Arc::new(WakeBoard::default());
        Ok(PgShared {
            key: dsn.driver_url.clone(),
            pool,
            options,
            connect_timeout,
            secrets: dsn.secrets.clone(),
            listener: PgNotifyListener::new(listener_pool, board.clone()),
            board,
            first_contact: FirstContact::default(),
        })
    }

    async fn ensure_reachable(&self, op: &str) -> Result<()> {
        self.first_contact
            .ensure(|| async {
                match tokio::time::timeout(self.connect_timeout, self.options.connect()).await {
                    Ok(Ok(conn)) => {
                        let _ = conn.close().await;
                        Ok(())
                    }
                    Ok(Err(err)) => Err(self.error(op, &err)),
                    Err(_) => Err(no_answer(
                        Dialect::Postgres,
                        op,
                        self.connect_timeout,
                        &self.secrets,
                    )),
                }
            })
            .await
    }

    fn error(&self, op: &str, err: &sqlx::Error) -> Error {
        let detail = match err {
            sqlx::Error::PoolTimedOut => format!(
                "no connection could be obtained within {} ms (server unreachable or pool exhausted)",
                self.connect_timeout.as_millis()
            ),
            sqlx::Error::Database(db) => match db.code() {
                Some(code) => format!("{} (SQLSTATE {code})", db.message()),
                None => db.message().to_owned(),
            },
            other => other.to_string(),
        };
        driver_error(Dialect::Postgres, op, classify(err), &detail, &self.secrets)
    }
}

/// SQLSTATE classes: 08 connection, 28 authorization, 57P shutdown/cannot connect, 3D000
/// unknown database; 42P01 undefined table; 40001/40P01 serialization failure/deadlock.
fn classify(err: &sqlx::Error) -> Failure {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Failure::Connection,
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("42P01") => Failure::NotFound,
            Some("40001" | "40P01") => Failure::Transient,
            Some("3D000") => Failure::Connection,
            Some(code)
                if code.starts_with("08") || code.starts_with("28") || code.starts_with("57P") =>
            {
                Failure::Connection
            }
            _ => Failure::Other,
        },
        _ => Failure::Other,
    }
}

/// The SQL of one table, built once (the table name is allowlisted before it gets here).
struct Statements {
    create_table: String,
    create_index: String,
    insert: String,
    claim: String,
    delete: String,
    redeliver: String,
    release: String,
    keep_head: String,
    next_due: String,
    list: String,
    find: String,
    count: String,
}

impl Statements {
    fn new(t: &str, notify: bool) -> Self {
        // Predicate and order shared with upstream workers (mixed fleets): due, and either
        // never delivered or delivered longer ago than the redelivery timeout.
        let claimable = "queue_name = $1 AND available_at <= now() \
             AND (delivered_at IS NULL OR delivered_at < now() - make_interval(secs => $2::float8))";
        let insert = if notify {
            format!(
                "WITH ins AS ( \
                   INSERT INTO {t} (queue_name, body, headers, available_at) \
                   SELECT $1::text, m.body, m.headers, now() + make_interval(secs => m.delay_ms / 1000) \
                   FROM unnest($2::text[], $3::text[], $4::float8[]) WITH ORDINALITY AS m(body, headers, delay_ms, ord) \
                   ORDER BY m.ord RETURNING id \
                 ), notified AS MATERIALIZED (SELECT pg_notify($5::text, $1::text)) \
                 SELECT ins.id::text AS id FROM ins CROSS JOIN notified ORDER BY ins.id"
            )
        } else {
            format!(
                "WITH ins AS ( \
                   INSERT INTO {t} (queue_name, body, headers, available_at) \
                   SELECT $1::text, m.body, m.headers, now() + make_interval(secs => m.delay_ms / 1000) \
                   FROM unnest($2::text[], $3::text[], $4::float8[]) WITH ORDINALITY AS m(body, headers, delay_ms, ord) \
                   ORDER BY m.ord RETURNING id \
                 ) SELECT ins.id::text AS id FROM ins ORDER BY ins.id"
            )
        };
        let redeliver_tail = if notify {
            "SELECT ins.id::text AS id FROM ins CROSS JOIN LATERAL (SELECT pg_notify($5::text, ins.queue_name)) AS n"
        } else {
            "SELECT ins.id::text AS id FROM ins WHERE $5::text IS NOT NULL"
        };
        let release = if notify {
            format!(
                "WITH r AS (UPDATE {t} SET delivered_at = NULL WHERE id = ANY($1::bigint[]) RETURNING queue_name) \
                 SELECT count(*) FROM (SELECT DISTINCT queue_name FROM r) AS q \
                 CROSS JOIN LATERAL (SELECT pg_notify($2::text, q.queue_name)) AS n"
            )
        } else {
            format!(
                "UPDATE {t} SET delivered_at = NULL WHERE id = ANY($1::bigint[]) AND $2::text IS NOT NULL"
            )
        };
        Self {
            create_table: format!(
                "CREATE TABLE IF NOT EXISTS {t} (\n  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n  body TEXT NOT NULL,\n  headers TEXT NOT NULL,\n  queue_name VARCHAR(190) NOT NULL,\n  created_at TIMESTAMPTZ(3) NOT NULL DEFAULT now(),\n  available_at TIMESTAMPTZ(3) NOT NULL,\n  delivered_at TIMESTAMPTZ(3)\n)"
            ),
            create_index: format!(
                "CREATE INDEX IF NOT EXISTS {t}_claim_idx ON {t} (queue_name, available_at, delivered_at, id)"
            ),
            insert,
            claim: format!(
                "WITH due AS ( \
                   SELECT id FROM {t} WHERE {claimable} \
                   ORDER BY available_at, delivered_at, id LIMIT $3 FOR UPDATE SKIP LOCKED \
                 ), claimed AS ( \
                   UPDATE {t} AS m SET delivered_at = now() FROM due WHERE m.id = due.id \
                   RETURNING m.id, m.body, m.headers, m.available_at \
                 ) SELECT claimed.id::text AS id, body, headers FROM claimed ORDER BY claimed.available_at, claimed.id"
            ),
            delete: format!("DELETE FROM {t} WHERE id = ANY($1::bigint[])"),
            redeliver: format!(
                "WITH original AS (DELETE FROM {t} WHERE id = $1 RETURNING queue_name), \
                 ins AS ( \
                   INSERT INTO {t} (queue_name, body, headers, available_at) \
                   SELECT queue_name, $2::text, $3::text, now() + make_interval(secs => $4::float8 / 1000) \
                   FROM original RETURNING id, queue_name \
                 ) {redeliver_tail}"
            ),
            release,
            keep_head: format!("UPDATE {t} SET delivered_at = now() WHERE delivered_at IS NOT NULL AND id IN "),
            next_due: format!(
                "SELECT (extract(epoch FROM (min(available_at) - now())) * 1000)::float8 AS wait_ms \
                 FROM {t} WHERE queue_name = $1 \
                 AND (delivered_at IS NULL OR delivered_at < now() - make_interval(secs => $2::float8))"
            ),
            list: format!(
                "SELECT id::text AS id, body, headers FROM {t} WHERE queue_name = $1 ORDER BY {t}.available_at, {t}.id LIMIT $2"
            ),
            find: format!("SELECT id::text AS id, body, headers FROM {t} WHERE id = $1"),
            count: format!("SELECT count(*) AS count FROM {t} WHERE {claimable}"),
        }
    }
}

/// One queue of one table on PostgreSQL.
pub struct PostgresQueue {
    shared: Arc<PgShared>,
    config: QueueConfig,
    sql: Statements,
    wake: Arc<WakeSignal>,
}

impl PostgresQueue {
    pub fn open(dsn: &SqlDsn, config: QueueConfig) -> Result<Self> {
        let shared = PgShared::join(dsn, config.connect_timeout)?;
        let wake = shared.board.signal(&config.table, &config.queue);
        Ok(Self {
            sql: Statements::new(&config.table, config.use_notify),
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
}

fn stored(row: &PgRow) -> std::result::Result<StoredMessage, sqlx::Error> {
    Ok(StoredMessage {
        id: row.try_get("id")?,
        body: row.try_get("body")?,
        headers: row.try_get("headers")?,
    })
}

impl SqlWaits for PostgresQueue {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            push_wakeup: self.config.use_notify,
        }
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
        Box::pin(async move {
            self.config.use_notify && self.shared.listener.is_listening(&self.config.table)
        })
    }
}

impl Engine for PostgresQueue {
    fn wake_signal(&self) -> Arc<WakeSignal> {
        self.wake.clone()
    }

    fn setup(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            self.ready("setup").await?;
            let run = async {
                let mut tx = self.shared.pool.begin().await?;
                // Concurrent CREATE … IF NOT EXISTS can still collide in the catalog; one
                // process at a time per table.
                sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                    .bind(format!("nestjs-messenger:{}", self.config.table))
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(&self.sql.create_table)
                    .persistent(false)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(&self.sql.create_index)
                    .persistent(false)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await
            };
            run.await.map_err(|e| self.err("setup", e))
        })
    }

    fn insert(&self, messages: Vec<NewMessage>) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            self.ready("send").await?;
            let count = messages.len();
            let mut bodies = Vec::with_capacity(count);
            let mut headers = Vec::with_capacity(count);
            let mut delays = Vec::with_capacity(count);
            for m in messages {
                bodies.push(m.body);
                headers.push(m.headers);
                delays.push(m.delay_ms);
            }
            let rows = with_transient_retry(classify, || {
                sqlx::query(&self.sql.insert)
                    .bind(&self.config.queue)
                    .bind(&bodies)
                    .bind(&headers)
                    .bind(&delays)
                    .bind(&self.config.table)
                    .fetch_all(&self.shared.pool)
            })
            .await
            .map_err(|e| self.err("send", e))?;
            let mut ids = Vec::with_capacity(rows.len());
            for row in &rows {
                ids.push(
                    row.try_get::<String, _>("id")
                        .map_err(|e| self.err("send", e))?,
                );
            }
            // Ids ascend in insertion order; sort numerically (text order would put "10" < "9").
            ids.sort_by_key(|id| (id.len(), id.clone()));
            Ok(ids)
        })
    }

    fn claim(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(async move {
            self.ready("claim").await?;
            let rows = with_transient_retry(classify, || {
                sqlx::query(&self.sql.claim)
                    .bind(&self.config.queue)
                    .bind(self.config.redeliver_timeout_seconds)
                    .bind(i64::from(limit))
                    .fetch_all(&self.shared.pool)
            })
            .await
            .map_err(|e| self.err("claim", e))?;
            rows.iter()
                .map(stored)
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| self.err("claim", e))
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
            with_transient_retry(classify, || {
                sqlx::query(&self.sql.delete)
                    .bind(&ids)
                    .execute(&self.shared.pool)
            })
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
            let row = with_transient_retry(classify, || {
                sqlx::query(&self.sql.redeliver)
                    .bind(id)
                    .bind(&copy.body)
                    .bind(&copy.headers)
                    .bind(copy.delay_ms)
                    .bind(&self.config.table)
                    .fetch_optional(&self.shared.pool)
            })
            .await
            .map_err(|e| self.err("reject", e))?;
            row.map(|r| r.try_get::<String, _>("id"))
                .transpose()
                .map_err(|e| self.err("reject", e))
        })
    }

    fn release(&self, ids: Vec<String>) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let ids = numeric_ids(&ids);
            sqlx::query(&self.sql.release)
                .bind(&ids)
                .bind(&self.config.table)
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
                self.shared.listener.stop().await;
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
    fn ddl_is_upstream_byte_for_byte() {
        let sql = Statements::new("messenger_messages", true);
        assert_eq!(
            sql.create_table,
            "CREATE TABLE IF NOT EXISTS messenger_messages (\n  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n  body TEXT NOT NULL,\n  headers TEXT NOT NULL,\n  queue_name VARCHAR(190) NOT NULL,\n  created_at TIMESTAMPTZ(3) NOT NULL DEFAULT now(),\n  available_at TIMESTAMPTZ(3) NOT NULL,\n  delivered_at TIMESTAMPTZ(3)\n)"
        );
        assert_eq!(
            sql.create_index,
            "CREATE INDEX IF NOT EXISTS messenger_messages_claim_idx ON messenger_messages (queue_name, available_at, delivered_at, id)"
        );
    }

    #[test]
    fn notify_is_only_in_the_notify_statements() {
        let on = Statements::new("t", true);
        let off = Statements::new("t", false);
        assert!(on.insert.contains("pg_notify") && on.redeliver.contains("pg_notify"));
        assert!(!off.insert.contains("pg_notify") && !off.redeliver.contains("pg_notify"));
        assert!(on.claim.contains("FOR UPDATE SKIP LOCKED"));
    }

    #[test]
    fn classifies_sqlstates() {
        assert_eq!(classify(&sqlx::Error::PoolTimedOut), Failure::Connection);
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(classify(&io), Failure::Connection);
        assert_eq!(classify(&sqlx::Error::RowNotFound), Failure::Other);
    }
    #[test]
    fn listing_orders_by_the_numeric_id_not_its_text_alias() {
        let sql = Statements::new("t", true);
        assert!(
            sql.list.contains("ORDER BY t.available_at, t.id"),
            "{}",
            sql.list
        );
    }
    #[test]
    fn claims_in_the_claim_index_order_so_no_claim_sorts_the_queue() {
        let sql = Statements::new("t", true);
        assert!(
            sql.claim.contains("available_at, delivered_at, id LIMIT"),
            "{}",
            sql.claim
        );
    }
}
