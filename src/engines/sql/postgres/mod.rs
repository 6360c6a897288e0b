//! PostgreSQL: the upstream table, batch claims with `FOR UPDATE SKIP LOCKED` in one
//! statement (in a transaction that knows its rows before it commits), sends as one `unnest` INSERT with NOTIFY (channel = table, payload = queue) in
//! the same statement, and one LISTEN connection per process and DSN for push wake-ups (to
//! `listenDsn` when one is given). A DSN through PgBouncer in transaction mode is found out,
//! or says so (`pgbouncer=true`): see `pooler`.

mod claimed_insert;
mod errors;
mod hosts;
mod listener;
mod pooler;
mod session_defaults;
mod statements;
mod tls_modes;

use crate::engines::sql::claim_doubt::ClaimAttempt;
use crate::engines::sql::connector::{
    Connector, ContactError, DialectFacts, OpenedTarget, TableStatements,
};
use crate::engines::sql::dialect::{renew_returning, ClaimedInsert, SqlDialect};
use crate::engines::sql::driver::{rows_on, Driver, SqlResult};
use crate::engines::sql::errors::Failure;
use crate::engines::sql::ids::{claimed_rows, HeldRow};
use crate::engines::sql::queue_context::QueueContext;
use crate::engines::sql::retry::{retry, Repeat};
use crate::engines::sql::target::{
    invalid_dsn, pool_share, server_pool_options, ConnectionEpoch, SqlTarget, MAX_POOL_CONNECTIONS,
};
use crate::queue::engine::{Held, NewMessage, StoredMessage};
use crate::queue::wake::WakeBoard;
use crate::support::dsn::SqlDsn;
use crate::support::error::Result;
use crate::support::targets::Targets;
use futures_util::future::BoxFuture;
use listener::PgNotifyListener;
use sqlx::error::DatabaseError;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Row};
use statements::PgStatements;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

pub struct Postgres;

/// PostgreSQL's per-DSN state: the LISTEN connection shared by the DSN's queues (none through
/// a transaction pooler without `listenDsn`), and what is known of a pooler in between.
pub struct PgExtra {
    listener: Option<Arc<PgNotifyListener>>,
    /// Whether the LISTEN connection goes through the DSN itself (no `listenDsn`): it is not
    /// used once a transaction pooler is found there.
    listens_through_dsn: bool,
    pooler: Arc<pooler::Pooler>,
    /// The target's pool, for first contact's look at a pooler in between.
    pool: PgPool,
    /// The DSN's hosts, and which of them the pool connects to.
    hosts: Arc<hosts::Hosts>,
}

impl PgExtra {
    /// The LISTEN connection, unless it would go through a transaction pooler (it would
    /// listen on a server connection lent to others a moment later).
    fn usable_listener(&self) -> Option<&Arc<PgNotifyListener>> {
        let listener = self.listener.as_ref()?;
        if self.listens_through_dsn && self.pooler.transaction_pooled() {
            listener.cancel();
            return None;
        }
        Some(listener)
    }
}

impl Drop for PgExtra {
    // The DSN's queues are gone, closed or not: the LISTEN task (which holds the listener
    // itself) ends with them, and its connection is let go; the hosts let go of the pool.
    fn drop(&mut self) {
        self.hosts.release();
        if let Some(listener) = &self.listener {
            listener.cancel();
        }
    }
}

static TARGETS: LazyLock<Targets<SqlTarget<Postgres>>> = LazyLock::new(Targets::default);

impl Connector for Postgres {
    type Db = sqlx::Postgres;
    type Extra = PgExtra;
    type Statements = PgStatements;

    const FACTS: DialectFacts = DialectFacts {
        name: "postgres",
        label: "PostgreSQL",
        push_wakeup: true,
        shared_poll: true,
        has_server: true,
    };
    const TOKEN_OF: &'static str = statements::TOKEN_OF;
    /// The pool's ten and the LISTEN connection.
    const DEFAULT_MAX_CONNECTIONS: u32 = MAX_POOL_CONNECTIONS + 1;

    /// A transport with another `listenDsn` gets a target of its own.
    fn target_key(dsn: &SqlDsn, connect_timeout: Duration) -> Result<String> {
        let listen = dsn.listen.as_ref().map_or("", |l| l.driver_url.as_str());
        Ok(format!(
            "{} connect_timeout_ms={} listen={listen}",
            dsn.driver_url,
            connect_timeout.as_millis()
        ))
    }

    fn open_target(
        dsn: &SqlDsn,
        connect_timeout: Duration,
        board: &Arc<WakeBoard>,
        max_connections: u32,
    ) -> Result<OpenedTarget<Self>> {
        let said_pooled = pooler::said_pooled(&dsn.driver_url).map_err(|e| invalid_dsn(dsn, e))?;
        let said_transaction_pooled = said_pooled == Some(true);
        // The LISTEN connection counts when it goes to this DSN's server (not to `listenDsn`).
        let listens_through_dsn = dsn.listen.is_none();
        let listens_here = listens_through_dsn && !said_transaction_pooled;
        let pool_max = pool_share(
            max_connections,
            u32::from(listens_here),
            ", and the LISTEN connection is one more",
        )?;
        let hosts = Arc::new(host_options(dsn, connect_timeout)?);
        let options = hosts.first().clone();
        let pooler = Arc::new(pooler::Pooler::new(said_pooled, &options));
        let epoch = Arc::new(ConnectionEpoch::default());
        let (checked_hosts, on_connect) = (hosts.clone(), pooler.clone());
        let pool = server_pool_options(connect_timeout, pool_max, epoch.clone())
            .after_connect(move |conn, _meta| {
                let (hosts, pooler) = (checked_hosts.clone(), on_connect.clone());
                Box::pin(async move {
                    hosts.check(conn).await?;
                    pooler.on_connect(conn).await
                })
            })
            .connect_lazy_with(options.clone());
        hosts.steer(&pool);
        let listen_options = match &dsn.listen {
            Some(listen) => Some(connect_options(listen)?),
            None => (!said_transaction_pooled).then(|| options.clone()),
        };
        let listener = listen_options.map(|listen_options| {
            // A connection opened before the DSN's server turned out to take no writes is
            // not listened on again: the NOTIFYs come from the server that does.
            let listener_epoch = epoch.clone();
            let listener_hosts = listens_through_dsn.then(|| hosts.clone());
            let listener_pool = PgPoolOptions::new()
                .max_connections(1)
                .test_before_acquire(false)
                .before_acquire(move |_, meta| {
                    let fresh = !listener_epoch.predates(meta.age);
                    Box::pin(async move { Ok(fresh) })
                })
                // Through the DSN, it listens where a send may be written: on a server that
                // fits `target_session_attrs` among its hosts.
                .after_connect(move |conn, _meta| {
                    let hosts = listener_hosts.clone();
                    Box::pin(async move {
                        match hosts {
                            Some(hosts) => hosts.check(conn).await,
                            None => Ok(()),
                        }
                    })
                })
                .acquire_timeout(connect_timeout)
                .idle_timeout(None)
                .connect_lazy_with(listen_options);
            if listens_through_dsn {
                hosts.steer(&listener_pool);
            }
            PgNotifyListener::new(listener_pool, board.clone())
        });
        Ok(OpenedTarget {
            pool: pool.clone(),
            epoch,
            extra: PgExtra {
                listener,
                listens_through_dsn,
                pooler,
                pool: pool.clone(),
                hosts,
            },
            changed_elsewhere: Arc::default(),
        })
    }

    /// Finds out whether a transaction pooler is in between (see `pooler`).
    fn first_contact<'a>(
        conn: &'a mut PgConnection,
        extra: &'a PgExtra,
        _error: ContactError<'a>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            extra.pooler.first_contact(conn, &extra.pool).await;
            Ok(())
        })
    }

    fn transaction_pooled(extra: &PgExtra) -> bool {
        extra.pooler.transaction_pooled()
    }

    fn close_target(extra: &PgExtra) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(listener) = &extra.listener {
                listener.stop().await;
            }
        })
    }

    fn due_by_queue(table: &str) -> String {
        statements::due_by_queue(table)
    }

    fn statements(table: &str, notify: bool) -> (TableStatements, PgStatements) {
        statements::statements(table, notify)
    }

    fn classify_database(err: &dyn DatabaseError) -> Failure {
        errors::classify_database(err)
    }

    /// A server that refuses writes also moves the pool on to the DSN's next host.
    fn unfits_connections(extra: &PgExtra, err: &dyn DatabaseError) -> bool {
        if errors::refuses_writes(err) {
            extra.hosts.look_again();
            if let Some(listener) = extra
                .listener
                .as_ref()
                .filter(|_| extra.listens_through_dsn)
            {
                listener.renew();
            }
            return true;
        }
        extra.pooler.hears(err)
    }

    fn connection_failed(extra: &PgExtra) {
        extra.hosts.look_again();
    }

    fn before_first_contact(extra: &PgExtra) -> BoxFuture<'_, ()> {
        Box::pin(extra.hosts.settle())
    }

    fn describe(err: &dyn DatabaseError) -> String {
        errors::describe(err)
    }

    fn database_cause(err: &dyn DatabaseError) -> crate::support::error::Cause {
        errors::cause(err)
    }
}

impl SqlDialect for Postgres {
    const CLAIMS_ON_INSERT: bool = true;

    fn targets() -> &'static Targets<SqlTarget<Self>> {
        &TARGETS
    }

    /// PostgreSQL text cannot hold NUL: such a message is refused alone, before it is queued,
    /// instead of failing every send it would be written with.
    fn check_message(_queue: &QueueContext<Self>, message: &NewMessage) -> Result<()> {
        if message.body.contains('\0') || message.headers.contains('\0') {
            return Err(crate::support::error::Error::invalid_argument(
                "PostgreSQL transport cannot store a message whose encoded body or headers contain the NUL character (\\u0000); PostgreSQL text does not allow it.",
            ));
        }
        Ok(())
    }

    /// Watched by the pooler too: a transaction pooler found on connecting ends the LISTEN
    /// through the DSN, and the queue is told its consumers poll.
    fn watch(queue: &QueueContext<Self>, counters: &Arc<crate::queue::stats::Counters>) {
        if queue.config.use_notify {
            let extra = &queue.target.extra;
            if let Some(listener) = &extra.listener {
                listener.watch(counters);
            }
            if extra.listens_through_dsn {
                extra.pooler.watch(counters);
            }
        }
    }

    fn push_ready(queue: &QueueContext<Self>) -> bool {
        let extra = &queue.target.extra;
        match extra.usable_listener() {
            Some(listener) => listener.is_listening(&queue.config.table),
            None => {
                extra.pooler.tell_polling();
                false
            }
        }
    }

    fn insert(
        queue: &QueueContext<Self>,
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
            let rows = retry(
                Repeat::Answered,
                MAX_POOL_CONNECTIONS,
                |e| queue.target.classify(e),
                || async {
                    let mut conn = queue.target.acquire_for_write().await?;
                    let insert = sqlx::query::<sqlx::Postgres>(&queue.sql.insert)
                        .bind(&queue.config.queue)
                        .bind(&bodies)
                        .bind(&headers)
                        .bind(&delays)
                        .bind(&queue.config.table);
                    let rows = rows_on(&mut *conn, pooled(queue), insert).await?;
                    queue.target.send_connection.keep(conn);
                    Ok(rows)
                },
            )
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

    fn insert_claimed<'a>(
        queue: &'a QueueContext<Self>,
        message: &'a NewMessage,
        attempt: &'a mut ClaimAttempt,
    ) -> BoxFuture<'a, ClaimedInsert> {
        Box::pin(claimed_insert::insert_claimed(queue, message, attempt))
    }

    fn claim<'a>(
        queue: &'a QueueContext<Self>,
        limit: u32,
        attempt: &'a mut ClaimAttempt,
    ) -> BoxFuture<'a, SqlResult<Vec<StoredMessage>>> {
        Box::pin(async move {
            let kept = &queue.target.claim_connection;
            let mut conn = kept.take(&queue.target.pool).await?;
            // In a transaction of its own, so that the rows and their tokens are known before
            // the commit: should the commit's reply be lost, exactly those rows are released
            // (fenced by their tokens), whenever that is, and no other consumer's. A claim
            // whose reply is lost before the commit was sent is rolled back by the server.
            let mut claiming = sqlx::Connection::begin(&mut *conn).await?;
            let claim = sqlx::query::<sqlx::Postgres>(&queue.sql.claim)
                .bind(&queue.config.queue)
                .bind(queue.config.redeliver_timeout_seconds)
                .bind(i64::from(limit))
                .bind(attempt.nonce)
                .bind(attempt.span_ms);
            let rows = rows_on(&mut *claiming, pooled(queue), claim).await?;
            let claimed = rows
                .iter()
                .map(sqlx::Postgres::claimed_of)
                .collect::<SqlResult<Vec<StoredMessage>>>()?;
            attempt.hold(claimed_rows(&claimed));
            claiming.commit().await?;
            // A full claim is followed by another soon (the read-ahead).
            if claimed.len() >= limit as usize {
                kept.keep(conn);
            }
            Ok(claimed)
        })
    }

    /// The claim's reply is all there is: its rows are those of the queue stamped with the
    /// attempt's residue within the time it can have run in, but for this process's own
    /// claims since (see `claim_doubt`); a claimed insert's rows likewise.
    fn release_by_stamp<'a>(
        queue: &'a QueueContext<Self>,
        attempt: &'a ClaimAttempt,
    ) -> BoxFuture<'a, SqlResult<()>> {
        Box::pin(async move {
            // A claim knows its rows before it commits: only a send stored claimed is
            // looked for by its stamp.
            if !attempt.stamped() {
                return Ok(());
            }
            let release = sqlx::query::<sqlx::Postgres>(&queue.sql.release_stamped)
                .bind(&queue.config.table)
                .bind(&queue.config.queue)
                .bind(attempt.nonce)
                .bind(attempt.window().as_secs_f64())
                .bind(attempt.span_ms)
                .bind(queue.target.recent_claims.sharing_residue(attempt));
            let mut conn = queue.target.pool.acquire().await?;
            rows_on(&mut *conn, pooled(queue), release).await?;
            Ok(())
        })
    }

    fn redeliver<'a>(
        queue: &'a QueueContext<Self>,
        id: i64,
        token: Option<i64>,
        copy: &'a NewMessage,
    ) -> BoxFuture<'a, SqlResult<Option<String>>> {
        Box::pin(async move {
            let redeliver = sqlx::query::<sqlx::Postgres>(&queue.sql.redeliver)
                .bind(id)
                .bind(&copy.body)
                .bind(&copy.headers)
                .bind(copy.delay_ms)
                .bind(&queue.config.table)
                .bind(token);
            let mut conn = queue.target.pool.acquire().await?;
            let rows = rows_on(&mut *conn, pooled(queue), redeliver).await?;
            rows.first()
                .map(|r| r.try_get::<String, _>("id"))
                .transpose()
        })
    }

    fn release(queue: &QueueContext<Self>, condition: String) -> BoxFuture<'_, SqlResult<()>> {
        Box::pin(async move {
            let sql = format!(
                "{}{condition}{}",
                queue.sql.release_head, queue.sql.release_tail
            );
            let release = sqlx::query::<sqlx::Postgres>(&sql)
                .persistent(false)
                .bind(&queue.config.table);
            let mut conn = queue.target.pool.acquire().await?;
            rows_on(&mut *conn, pooled(queue), release).await?;
            Ok(())
        })
    }

    /// Stamped with a whole renewal grain, which no claim's residue is: a lost claim's
    /// release never takes a live renewal (see `claim_doubt`).
    fn renew(
        queue: &QueueContext<Self>,
        rows: Vec<HeldRow>,
    ) -> BoxFuture<'_, SqlResult<Vec<Held>>> {
        renew_returning(queue, &queue.sql.renew_head, &rows)
    }
}

/// Whether `queue`'s statements with binds each need a transaction of their own.
fn pooled(queue: &QueueContext<Postgres>) -> bool {
    queue.target.extra.pooler.transaction_pooled()
}

/// The driver's options for each of `dsn`'s hosts, and which servers may serve.
fn host_options(dsn: &SqlDsn, connect_timeout: Duration) -> Result<hosts::Hosts> {
    let split = hosts::host_urls(&dsn.driver_url).map_err(|e| invalid_dsn(dsn, e))?;
    let options = split
        .urls
        .iter()
        .map(|url| connect_options_at(dsn, url))
        .collect::<Result<Vec<_>>>()?;
    Ok(hosts::Hosts::new(options, split.attrs, connect_timeout))
}

/// The driver's options for `dsn`: its TLS mode (see `tls_modes`), plain on loopback when it
/// says nothing of TLS, and no `extra_float_digits` startup parameter, which PgBouncer refuses
/// ("unsupported startup parameter") unless told to ignore it. The parameter only changes how
/// floats are written as text, and no float is read as text here (binds and rows are binary).
fn connect_options(dsn: &SqlDsn) -> Result<PgConnectOptions> {
    connect_options_at(dsn, &dsn.driver_url)
}

/// [`connect_options`] of `dsn` at `url` (one of its hosts).
fn connect_options_at(dsn: &SqlDsn, url: &str) -> Result<PgConnectOptions> {
    let tls = tls_modes::tls_choice(url).map_err(|e| invalid_dsn(dsn, e))?;
    let options = PgConnectOptions::from_str(&tls.url)
        .map_err(|e| invalid_dsn(dsn, e))?
        .extra_float_digits(None)
        .disable_statement_logging();
    Ok(match tls.mode {
        Some(mode) => options.ssl_mode(mode.for_sqlx()),
        None => session_defaults::plain_on_loopback(options, &tls.url),
    })
}
