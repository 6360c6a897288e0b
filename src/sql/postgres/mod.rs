//! PostgreSQL: the upstream table, batch claims with `FOR UPDATE SKIP LOCKED` in one
//! statement, sends as one `unnest` INSERT with NOTIFY (channel = table, payload = queue) in
//! the same statement, and one LISTEN connection per process and DSN for push wake-ups.

mod errors;
mod listener;
mod session_defaults;
mod statements;
mod tls_modes;

use crate::dsn::SqlDsn;
use crate::engine::{Held, NewMessage, StoredMessage};
use crate::error::Result;
use crate::sql::claim_doubt::ClaimAttempt;
use crate::sql::dialect::{
    renew_returning, DialectFacts, OpenedTarget, SqlDialect, TableStatements,
};
use crate::sql::driver::{Driver, SqlResult};
use crate::sql::errors::Failure;
use crate::sql::ids::HeldRow;
use crate::sql::retry::with_rollback_retry;
use crate::sql::table_queue::TableQueue;
use crate::sql::target::{
    invalid_dsn, server_pool_options, with_keepalive, ServerAddress, SqlTarget,
};
use crate::targets::Targets;
use crate::wake::WakeBoard;
use futures_util::future::BoxFuture;
use listener::PgNotifyListener;
use sqlx::error::DatabaseError;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Row};
use statements::PgStatements;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

pub struct Postgres;

/// PostgreSQL's per-DSN state: the LISTEN connection shared by the DSN's queues.
pub struct PgExtra {
    listener: Arc<PgNotifyListener>,
}

static TARGETS: LazyLock<Targets<SqlTarget<Postgres>>> = LazyLock::new(Targets::default);

impl SqlDialect for Postgres {
    type Db = sqlx::Postgres;
    type Extra = PgExtra;
    type Statements = PgStatements;

    const FACTS: DialectFacts = DialectFacts {
        name: "postgres",
        label: "PostgreSQL",
        push_wakeup: true,
        shared_poll: false,
        has_server: true,
    };
    const TOKEN_OF: &'static str = statements::TOKEN_OF;

    fn targets() -> &'static Targets<SqlTarget<Self>> {
        &TARGETS
    }

    fn open_target(
        dsn: &SqlDsn,
        connect_timeout: Duration,
        board: &Arc<WakeBoard>,
    ) -> Result<OpenedTarget<Self>> {
        let tls = tls_modes::tls_choice(&dsn.driver_url).map_err(|e| invalid_dsn(dsn, e))?;
        let options = PgConnectOptions::from_str(&tls.url)
            .map_err(|e| invalid_dsn(dsn, e))?
            .disable_statement_logging();
        let options = match tls.mode {
            Some(mode) => options.ssl_mode(mode.for_sqlx()),
            None => session_defaults::plain_on_loopback(options, &tls.url),
        };
        let server = ServerAddress {
            host: options.get_host().to_owned(),
            port: options.get_port(),
        };
        let pool = with_keepalive(
            server_pool_options(connect_timeout),
            server.clone(),
            Some(session_defaults::SESSION_SETUP),
        )
        .connect_lazy_with(options.clone());
        let listener_pool = with_keepalive(
            PgPoolOptions::new()
                .max_connections(1)
                .test_before_acquire(false)
                .acquire_timeout(connect_timeout)
                .idle_timeout(None),
            server,
            None,
        )
        .connect_lazy_with(options.clone());
        Ok(OpenedTarget {
            pool,
            probe: Some(options),
            extra: PgExtra {
                listener: PgNotifyListener::new(listener_pool, board.clone()),
            },
        })
    }

    fn close_target(target: &SqlTarget<Self>) -> BoxFuture<'_, ()> {
        Box::pin(target.extra.listener.stop())
    }

    fn statements(table: &str, notify: bool) -> (TableStatements, PgStatements) {
        statements::statements(table, notify)
    }

    fn classify_database(err: &dyn DatabaseError) -> Failure {
        errors::classify_database(err)
    }

    fn describe(err: &dyn DatabaseError) -> String {
        errors::describe(err)
    }

    /// PostgreSQL text cannot hold NUL: such a message is refused alone, before it is queued,
    /// instead of failing every send it would be written with.
    fn check_message(_queue: &TableQueue<Self>, message: &NewMessage) -> Result<()> {
        if message.body.contains('\0') || message.headers.contains('\0') {
            return Err(crate::error::Error::invalid_argument(
                "PostgreSQL transport cannot store a message whose encoded body or headers contain the NUL character (\\u0000); PostgreSQL text does not allow it.",
            ));
        }
        Ok(())
    }

    fn watch(queue: &TableQueue<Self>, counters: &Arc<crate::stats::Counters>) {
        if queue.config.use_notify {
            queue.target.extra.listener.watch(counters);
        }
    }

    fn push_ready(queue: &TableQueue<Self>) -> bool {
        queue
            .target
            .extra
            .listener
            .is_listening(&queue.config.table)
    }

    fn insert(
        queue: &TableQueue<Self>,
        messages: Vec<NewMessage>,
    ) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let count = messages.len();
            let mut bodies = Vec::with_capacity(count);
            let mut headers = Vec::with_capacity(count);
            let mut delays = Vec::with_capacity(count);
            for m in messages {
                bodies.push(m.body);
                headers.push(m.headers);
                delays.push(m.delay_ms);
            }
            let rows = with_rollback_retry(Self::classify, || async {
                let mut conn = queue.target.acquire_for_write().await?;
                let rows = sqlx::query(&queue.sql.insert)
                    .bind(&queue.config.queue)
                    .bind(&bodies)
                    .bind(&headers)
                    .bind(&delays)
                    .bind(&queue.config.table)
                    .fetch_all(&mut *conn)
                    .await?;
                queue.target.send_connection.keep(conn);
                Ok(rows)
            })
            .await
            .map_err(|e| queue.target.write_error("send", "the messages", &e))?;
            let mut ids = Vec::with_capacity(rows.len());
            for row in &rows {
                ids.push(
                    row.try_get::<String, _>("id")
                        .map_err(|e| queue.err("send", e))?,
                );
            }
            // Ids ascend in insertion order; sort numerically (text order would put "10" < "9").
            ids.sort_by_key(|id| (id.len(), id.clone()));
            Ok(ids)
        })
    }

    fn claim<'a>(
        queue: &'a TableQueue<Self>,
        limit: u32,
        attempt: &'a mut ClaimAttempt,
    ) -> BoxFuture<'a, SqlResult<Vec<StoredMessage>>> {
        Box::pin(async move {
            let kept = &queue.target.claim_connection;
            let mut conn = kept.take(&queue.target.pool).await?;
            let rows = sqlx::query(&queue.sql.claim)
                .bind(&queue.config.queue)
                .bind(queue.config.redeliver_timeout_seconds)
                .bind(i64::from(limit))
                .bind(attempt.nonce)
                .bind(attempt.span_ms)
                .fetch_all(&mut *conn)
                .await?;
            // A full claim is followed by another soon (the read-ahead).
            if rows.len() >= limit as usize {
                kept.keep(conn);
            }
            rows.iter().map(sqlx::Postgres::claimed_of).collect()
        })
    }

    /// The claim's reply is all there is: its rows are those of the queue stamped with the
    /// attempt's residue within the time it can have run in, but for this process's own
    /// claims since (see `claim_doubt`).
    fn release_in_doubt<'a>(
        queue: &'a TableQueue<Self>,
        attempt: &'a ClaimAttempt,
    ) -> BoxFuture<'a, SqlResult<()>> {
        Box::pin(async move {
            sqlx::query(&queue.sql.release_stamped)
                .bind(&queue.config.table)
                .bind(&queue.config.queue)
                .bind(attempt.nonce)
                .bind(attempt.window().as_secs_f64())
                .bind(attempt.span_ms)
                .bind(queue.target.recent_claims.sharing_residue(attempt))
                .execute(&queue.target.pool)
                .await?;
            Ok(())
        })
    }

    fn redeliver<'a>(
        queue: &'a TableQueue<Self>,
        id: i64,
        token: Option<i64>,
        copy: &'a NewMessage,
    ) -> BoxFuture<'a, SqlResult<Option<String>>> {
        Box::pin(async move {
            let row = sqlx::query(&queue.sql.redeliver)
                .bind(id)
                .bind(&copy.body)
                .bind(&copy.headers)
                .bind(copy.delay_ms)
                .bind(&queue.config.table)
                .bind(token)
                .fetch_optional(&queue.target.pool)
                .await?;
            row.map(|r| r.try_get::<String, _>("id")).transpose()
        })
    }

    fn release(queue: &TableQueue<Self>, condition: String) -> BoxFuture<'_, SqlResult<()>> {
        Box::pin(async move {
            let sql = format!(
                "{}{condition}{}",
                queue.sql.release_head, queue.sql.release_tail
            );
            sqlx::query(&sql)
                .persistent(false)
                .bind(&queue.config.table)
                .execute(&queue.target.pool)
                .await?;
            Ok(())
        })
    }

    /// Stamped with a whole renewal grain, which no claim's residue is: a lost claim's
    /// release never takes a live renewal (see `claim_doubt`).
    fn renew(queue: &TableQueue<Self>, rows: Vec<HeldRow>) -> BoxFuture<'_, SqlResult<Vec<Held>>> {
        renew_returning(queue, &queue.sql.renew_head, &rows)
    }
}
