//! MySQL 8 / MariaDB ≥ 10.6: the upstream table (LONGTEXT, utf8mb4, inline index), batch
//! claims with `FOR UPDATE SKIP LOCKED` in one short transaction, `NOW(3)` in the server's
//! own session time zone (never changed, so TypeScript and native workers read each other's
//! DATETIMEs alike), and polling plus in-process wake-ups for idle consumers.

mod claimed_insert;
mod errors;
mod insert;
mod name_column;
mod per_table;
mod server_clock;
mod statements;
mod text_columns;
mod version;
mod wake_ups;

use crate::engines::sql::claim_doubt::ClaimAttempt;
use crate::engines::sql::connector::{
    Connector, ContactError, DialectConnection, DialectFacts, OpenedTarget, TableStatements,
};
use crate::engines::sql::dialect::{ClaimedInsert, SqlDialect};
use crate::engines::sql::driver::{Driver, DueRow, SqlResult};
use crate::engines::sql::errors::Failure;
use crate::engines::sql::ids::{held_condition, id_list, HeldRow};
use crate::engines::sql::queue_context::QueueContext;
use crate::engines::sql::retry::{retry, Repeat};
use crate::engines::sql::target::{
    invalid_dsn, pool_share, server_pool_options, with_session_setup, ConnectionEpoch, SqlTarget,
    MAX_POOL_CONNECTIONS, MIN_POOL_CONNECTIONS,
};
use crate::queue::engine::{ClaimToken, Held, NewMessage, StoredMessage};
use crate::queue::wake::WakeBoard;
use crate::support::dsn::SqlDsn;
use crate::support::error::Result;
use crate::support::targets::Targets;
use futures_util::future::BoxFuture;
use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlConnectOptions;
use sqlx::pool::PoolConnection;
use sqlx::{ConnectOptions, Row};
use statements::MySqlStatements;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use text_columns::bind_text;

pub struct MySql;

/// Server settings batching depends on, read on first contact.
pub struct MySqlExtra {
    max_packet: AtomicU64,
    id_step: AtomicU64,
    text_columns: text_columns::TextColumns,
    /// Each table's `queue_name` column, as the shared poll compares names.
    name_columns: name_column::NameColumns,
    /// The server's clock, which sends stored claimed stamp their claims from.
    clock: server_clock::ServerClock,
    /// Wake-ups to and from other processes' idle consumers (see `wake_ups`).
    wake_ups: Arc<wake_ups::WakeUps>,
    /// Whether the budget leaves a connection for the sleeper beside what claims, acks,
    /// sends and polls keep.
    sleeps: bool,
}

static TARGETS: LazyLock<Targets<SqlTarget<MySql>>> = LazyLock::new(Targets::default);

impl Connector for MySql {
    type Db = sqlx::MySql;
    type Extra = MySqlExtra;
    type Statements = MySqlStatements;

    const FACTS: DialectFacts = DialectFacts {
        name: "mysql",
        label: "MySQL",
        push_wakeup: false,
        shared_poll: true,
        has_server: true,
    };
    const TOKEN_OF: &'static str = statements::TOKEN_OF;
    const DEFAULT_MAX_CONNECTIONS: u32 = MAX_POOL_CONNECTIONS;

    fn open_target(
        dsn: &SqlDsn,
        connect_timeout: Duration,
        _board: &Arc<WakeBoard>,
        max_connections: u32,
    ) -> Result<OpenedTarget<Self>> {
        let pool_max = pool_share(max_connections, 0, "")?;
        let changed_elsewhere = Arc::<crate::queue::wake::WakeSignal>::default();
        let options = MySqlConnectOptions::from_str(&dsn.driver_url)
            .map_err(|e| invalid_dsn(dsn, e))?
            // Keep the server's session defaults (time zone above all): see the module doc.
            .timezone(None)
            .pipes_as_concat(false)
            .no_engine_substitution(false)
            .charset("utf8mb4")
            .disable_statement_logging();
        // READ COMMITTED: a claim's UPDATE … WHERE id IN (…) may scan the primary key; under
        // REPEATABLE READ that locks every row it passes (other queues, rows being inserted by
        // other sessions) until commit, stalling claims and deadlocking sends. Under READ
        // COMMITTED rows that do not match are not locked. (The time zone is left alone: see
        // the module doc.)
        let epoch = Arc::new(ConnectionEpoch::default());
        let pool = with_session_setup(
            server_pool_options(connect_timeout, pool_max, epoch.clone()),
            Some("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"),
        )
        .connect_lazy_with(options);
        Ok(OpenedTarget {
            pool,
            epoch,
            extra: MySqlExtra {
                max_packet: AtomicU64::new(16 * 1024 * 1024),
                id_step: AtomicU64::new(1),
                text_columns: text_columns::TextColumns::default(),
                name_columns: name_column::NameColumns::default(),
                clock: server_clock::ServerClock::default(),
                wake_ups: wake_ups::WakeUps::new(changed_elsewhere.clone()),
                sleeps: pool_max > MIN_POOL_CONNECTIONS,
            },
            changed_elsewhere,
        })
    }

    /// Checks the server version and reads the settings batching depends on.
    fn close_target(extra: &MySqlExtra) -> BoxFuture<'_, ()> {
        extra.wake_ups.close();
        Box::pin(async {})
    }

    fn first_contact<'a>(
        conn: &'a mut DialectConnection<Self>,
        extra: &'a MySqlExtra,
        error: ContactError<'a>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let row = sqlx::query(
                "SELECT VERSION() AS version, CAST(@@max_allowed_packet AS UNSIGNED) AS max_packet, \
                 CAST(@@auto_increment_increment AS UNSIGNED) AS id_step, \
                 TIMESTAMPDIFF(MICROSECOND, '1970-01-01', NOW(3)) AS now_token",
            )
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| error(&e))?;
            let version: String = row.try_get("version").map_err(|e| error(&e))?;
            version::check_server_version(&version)?;
            let max_packet: u64 = row.try_get("max_packet").map_err(|e| error(&e))?;
            let id_step: u64 = row.try_get("id_step").map_err(|e| error(&e))?;
            extra.max_packet.store(max_packet, Ordering::Relaxed);
            extra.id_step.store(id_step.max(1), Ordering::Relaxed);
            if let Ok(now) = row.try_get::<i64, _>("now_token") {
                extra.clock.note(now);
            }
            Ok(())
        })
    }

    fn statements(table: &str, _notify: bool) -> (TableStatements, MySqlStatements) {
        statements::statements(table)
    }

    /// The poll compares names as the table's `queue_name` column does, which the catalog
    /// says (see `name_column`).
    fn poll_due<'a>(
        conn: &'a mut DialectConnection<Self>,
        extra: &'a MySqlExtra,
        table: &'a str,
        names: &'a str,
    ) -> BoxFuture<'a, SqlResult<Vec<DueRow>>> {
        Box::pin(async move {
            let column = extra.name_columns.of(conn, table).await?;
            let sql = statements::due_by_queue(table, &column);
            let rows = <sqlx::MySql as Driver>::fetch_due(conn, &sql, names, false).await;
            if rows.is_err() {
                extra.name_columns.forget(table);
            }
            rows
        })
    }

    fn classify_database(err: &dyn DatabaseError) -> Failure {
        errors::classify_database(err)
    }

    fn unfits_connections(_extra: &Self::Extra, err: &dyn DatabaseError) -> bool {
        errors::refuses_writes(err)
    }

    fn describe(err: &dyn DatabaseError) -> String {
        errors::describe(err)
    }

    fn database_cause(err: &dyn DatabaseError) -> crate::support::error::Cause {
        errors::cause(err)
    }
}

impl SqlDialect for MySql {
    const CLAIMS_ON_INSERT: bool = true;

    fn targets() -> &'static Targets<SqlTarget<Self>> {
        &TARGETS
    }

    fn check_message(queue: &QueueContext<Self>, message: &NewMessage) -> Result<()> {
        // The server's limit is known once it answered; before that, the batch check decides.
        if queue.target.reached() {
            insert::packets(queue, std::slice::from_ref(message))?;
        }
        Ok(())
    }

    fn insert(
        queue: &QueueContext<Self>,
        messages: Vec<NewMessage>,
    ) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let ranges = insert::packets(queue, &messages)?;
            retry(
                Repeat::Answered,
                MAX_POOL_CONNECTIONS,
                |e| queue.target.classify(e),
                || insert::insert_once(queue, &messages, &ranges),
            )
            .await
            .map_err(|e| queue.target.write_error("send", "the messages", &e))
        })
    }

    /// The process's sleeper wakes the table polls when another process sends.
    fn idles(queue: &QueueContext<Self>) {
        if queue.target.extra.sleeps {
            queue.target.extra.wake_ups.idles(&queue.target.pool);
        }
    }

    fn insert_claimed<'a>(
        queue: &'a QueueContext<Self>,
        message: &'a NewMessage,
        attempt: &'a mut ClaimAttempt,
    ) -> BoxFuture<'a, ClaimedInsert> {
        Box::pin(claimed_insert::insert_claimed(queue, message, attempt))
    }

    /// A claimed insert whose INSERT's result never came, by the residue it stamped (see
    /// `claimed_insert`); a claim notes its rows, and stamps nothing.
    fn release_by_stamp<'a>(
        queue: &'a QueueContext<Self>,
        attempt: &'a ClaimAttempt,
    ) -> BoxFuture<'a, SqlResult<()>> {
        if !attempt.stamped() {
            return Box::pin(async { Ok(()) });
        }
        let sql = queue.sql.release_stamped(
            &queue.config.queue,
            (attempt.nonce, attempt.span_ms),
            attempt.window().as_micros() as i64,
            claimed_insert::lateness_us(attempt.span_ms),
            &queue.target.recent_claims.sharing_residue(attempt),
        );
        sqlx::MySql::execute_text(&queue.target.pool, sql)
    }

    /// One claim transaction in two round trips: `BEGIN` with the SELECT locking a batch
    /// with SKIP LOCKED, then the UPDATE marking it delivered with the `COMMIT` (as text: a
    /// prepared UPDATE, whose text differs per claim, would be a PREPARE, an EXECUTE and a
    /// CLOSE). Not through sqlx's transaction, whose drop after our COMMIT queues a ROLLBACK
    /// that costs the connection's next use a round trip.
    fn claim<'a>(
        queue: &'a QueueContext<Self>,
        limit: u32,
        attempt: &'a mut ClaimAttempt,
    ) -> BoxFuture<'a, SqlResult<Vec<StoredMessage>>> {
        Box::pin(async move {
            let kept = &queue.target.claim_connection;
            let mut conn = kept.take(&queue.target.pool).await?;
            let mut tx = InTransaction::new(&mut conn);
            match claim_in(&mut tx, queue, limit, attempt).await {
                Ok(claimed) => {
                    drop(tx);
                    // The consumer's next claim (the read-ahead, or the look before it
                    // waits) follows.
                    kept.keep(conn);
                    Ok(claimed)
                }
                Err(err) => {
                    tx.end_after(&err).await;
                    Err(err)
                }
            }
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
            let as_bytes = (queue.target.extra.text_columns)
                .bytes_for(&mut tx, &queue.config.table)
                .await;
            let deleted = sqlx::query(&queue.sql.redeliver_delete)
                .bind(id)
                .bind(token)
                .bind(token)
                .execute(&mut *tx)
                .await?;
            if deleted.rows_affected() == 0 {
                tx.rollback().await?;
                return Ok(None);
            }
            let insert = sqlx::query(&queue.sql.insert_one).bind(&queue.config.queue);
            let insert = bind_text(insert, &copy.body, as_bytes);
            let done = bind_text(insert, &copy.headers, as_bytes)
                .bind(insert::delay_micros(copy))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Some(done.last_insert_id().to_string()))
        })
    }

    fn release(queue: &QueueContext<Self>, condition: String) -> BoxFuture<'_, SqlResult<()>> {
        let sql = format!("{}{condition}", queue.sql.release_head);
        sqlx::MySql::execute_text(&queue.target.pool, sql)
    }

    /// No `UPDATE … RETURNING` here: the new token is read from the server clock first and
    /// stored as is, so that the rows carrying it afterwards are the renewed ones.
    fn renew(
        queue: &QueueContext<Self>,
        rows: Vec<HeldRow>,
    ) -> BoxFuture<'_, SqlResult<Vec<Held>>> {
        Box::pin(async move {
            let mut conn = queue.target.pool.acquire().await?;
            let token: i64 = sqlx::query(&queue.sql.now_token)
                .fetch_one(&mut *conn)
                .await?
                .try_get("token")?;
            queue.target.extra.clock.note(token);
            let condition = held_condition(&rows, Self::TOKEN_OF);
            sqlx::query(&queue.sql.renew(token, &condition))
                .persistent(false)
                .execute(&mut *conn)
                .await?;
            let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
            let renewed = format!(
                "{}id IN {} AND {} = {token}",
                queue.sql.renewed_head,
                id_list(&ids),
                Self::TOKEN_OF
            );
            let found = sqlx::query(&renewed)
                .persistent(false)
                .fetch_all(&mut *conn)
                .await?;
            found
                .iter()
                .map(|row| {
                    Ok(Held {
                        id: row.try_get("id")?,
                        token: Some(ClaimToken::DeliveredAt(token)),
                    })
                })
                .collect()
        })
    }
}

/// One claim transaction on `tx` (see `SqlDialect::claim`), ended by its COMMIT.
async fn claim_in(
    tx: &mut InTransaction<'_>,
    queue: &QueueContext<MySql>,
    limit: u32,
    attempt: &mut ClaimAttempt,
) -> SqlResult<Vec<StoredMessage>> {
    let begin = queue.sql.begin_claim(
        &queue.config.queue,
        queue.config.redeliver_timeout_seconds,
        limit,
    );
    let rows = sqlx::Executor::fetch_all(&mut **tx.conn, begin.as_str()).await?;
    let claimed = rows
        .iter()
        .map(sqlx::MySql::claimed_of)
        .collect::<SqlResult<Vec<_>>>()?;
    let end = match claimed.first().and_then(|m| m.token?.delivered_at()) {
        Some(token) => {
            queue.target.extra.clock.note(token);
            let ids: Vec<i64> = claimed.iter().filter_map(|m| m.id.parse().ok()).collect();
            // Known before the COMMIT whose reply may be lost: what to release then.
            attempt.hold(
                ids.iter()
                    .map(|&id| HeldRow {
                        id,
                        token: Some(token),
                    })
                    .collect(),
            );
            format!("{}; COMMIT", queue.sql.mark_delivered(token, &ids))
        }
        None => "COMMIT".to_owned(),
    };
    sqlx::Executor::execute(&mut **tx.conn, end.as_str()).await?;
    tx.ended = true;
    Ok(claimed)
}

/// A pooled connection inside a transaction begun as text. Dropped before the transaction
/// ended (an error, or the claim abandoned mid-way) the connection is closed rather than
/// pooled: the server rolls the transaction back, and no later statement runs inside it (a
/// send made there would never commit).
struct InTransaction<'c> {
    conn: &'c mut PoolConnection<sqlx::MySql>,
    ended: bool,
}

impl<'c> InTransaction<'c> {
    fn new(conn: &'c mut PoolConnection<sqlx::MySql>) -> Self {
        Self { conn, ended: false }
    }

    /// After `err`: when the server answered it (a deadlock, a lock wait timeout, a table
    /// not there yet), the connection is sound, so the transaction is rolled back here and
    /// the connection pooled again; closing it would cost a reconnect, for a consumer polling
    /// a table that is not there yet one per poll. After any other failure it is closed.
    async fn end_after(&mut self, err: &sqlx::Error) {
        if matches!(err, sqlx::Error::Database(_))
            && sqlx::Executor::execute(&mut **self.conn, "ROLLBACK")
                .await
                .is_ok()
        {
            self.ended = true;
        }
    }
}

impl Drop for InTransaction<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.conn.close_on_drop();
        }
    }
}
