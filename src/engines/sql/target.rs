//! One connection target per process and DSN, shared by every queue of every dialect: the
//! pool, the first-contact probe, the wake board, the kept connections, the table pollers, and
//! the one place driver errors become the user's errors; and the pool settings of the server
//! dialects.
//!
//! Written over a dialect's connection side ([`Connector`]): it may import the connector, the
//! table pollers (it is their [`PollTarget`]) and the leaves below them (driver, errors, kept
//! connections, claim doubt), never the queue side (`super::dialect`) or the table queue. The
//! registry it joins is the caller's.

use super::claim_doubt::{InDoubt, RecentClaims};
pub use super::connection_epoch::ConnectionEpoch;
use super::connector::{Connector, OpenedTarget};
use super::driver::{DueRow, Runner, SqlResult};
use super::errors::{driver_error, no_answer, outcome_unknown, statement_outcome, Failure};
use super::kept_connection::KeptConnection;
use super::table_poller::{PollTarget, TablePollers};
use crate::queue::by_queue::ByQueue;
use crate::queue::engine::StoredMessage;
use crate::queue::hand_off::HandOffDesk;
use crate::queue::wake::WakeBoard;
use crate::support::dsn::SqlDsn;
use crate::support::error::{Error, Result};
use crate::support::locks::Locked;
use crate::support::targets::{same_budget, FirstContact, Targets};
use futures_util::future::BoxFuture;
use sqlx::pool::{PoolConnection, PoolConnectionMetadata, PoolOptions};
use sqlx::{ConnectOptions, Connection, Database, Pool};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// After a connection failure, pooled connections are suspect for this long: each write
/// first checks its connection with a ping (they may all have died with the server).
const SUSPECT_WINDOW: Duration = Duration::from_secs(30);

/// How long the last queue out waits for the target's connections to close.
const POOL_CLOSE_BOUND: Duration = Duration::from_secs(2);

/// How long first contact waits for the pool's first connection before it opens a probe
/// connection of its own (each connection costs the server a backend or a thread, and a
/// PostgreSQL backend start costs milliseconds of its CPU).
const PROBE_GRACE: Duration = Duration::from_millis(50);

/// How long a statement may take past the connect timeout (which bounds getting a
/// connection) before it is given up: a silent server (a network blackhole, a half-open
/// socket) must not hold a send, a claim, a release, a poll or `close()` for ever.
pub const STATEMENT_BOUND: Duration = Duration::from_secs(10);

/// Connections per pool (per process and DSN) of a server dialect, unless `maxConnections` says.
pub const MAX_POOL_CONNECTIONS: u32 = 10;
/// The fewest connections a pool works with: claims, acks and sends each keep one between
/// statements (see `KeptConnection`), and one more serves the rest (polls, setup, reads).
pub const MIN_POOL_CONNECTIONS: u32 = 4;
/// A pooled connection unused for this long is pinged before it is handed out: the server may
/// have closed it meanwhile (a restart, a failover, an idle timeout in between), and a write on
/// a connection that died unnoticed fails with its outcome unknown. Busy connections are never
/// pinged: claims, acks and sends keep theirs from one statement to the next.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

pub struct SqlTarget<D: Connector> {
    /// The registry the target was joined in, and its key there.
    registry: &'static Targets<SqlTarget<D>>,
    key: String,
    pub pool: Pool<D::Db>,
    /// When the pool's connections last became unfit (see [`ConnectionEpoch`]).
    pub epoch: Arc<ConnectionEpoch>,
    pub connect_timeout: Duration,
    /// The most connections this process opens to the DSN (`maxConnections`).
    pub max_connections: u32,
    pub secrets: Vec<String>,
    pub board: Arc<WakeBoard>,
    /// Where a send hands its messages, stored claimed, to an idle consumer of its queue.
    pub hand_offs: ByQueue<HandOffDesk<Vec<StoredMessage>>>,
    /// Claims (and sends stored claimed) whose rows may be hidden, by queue: whichever
    /// transport of the queue claims next releases them, so a send's are not left to a
    /// transport that never claims.
    pub in_doubt: ByQueue<InDoubt>,
    /// The shared polls of idle consumers, one per table (dialects without push wake-ups).
    pub pollers: TablePollers,
    first_contact: FirstContact,
    /// When a statement last failed on a connection (pooled ones may be dead since).
    connection_failed_at: Mutex<Option<Instant>>,
    /// The tokens of this process's recent claims, spared by lost-claim releases.
    pub recent_claims: RecentClaims,
    /// The connection of the last claim, for the next one (PostgreSQL keeps it after a full
    /// claim, MySQL after every claim: see each dialect's `claim`).
    pub claim_connection: KeptConnection<D::Db>,
    /// The connection of the last ack delete, for the next one.
    pub ack_connection: KeptConnection<D::Db>,
    /// The connection of the last send, for the next one (see [`acquire_for_write`]).
    ///
    /// [`acquire_for_write`]: SqlTarget::acquire_for_write
    pub send_connection: KeptConnection<D::Db>,
    pub extra: D::Extra,
}

impl<D: Connector> SqlTarget<D> {
    /// The live target of `dsn` in `registry` (the dialect's), or a new one; the caller is one
    /// more user until [`leave`].
    ///
    /// [`leave`]: SqlTarget::leave
    /// `max_connections` (a transport's `maxConnections`) is the budget of the whole target:
    /// a live target with another budget is not joined but refused.
    pub fn join(
        registry: &'static Targets<Self>,
        dsn: &SqlDsn,
        connect_timeout: Duration,
        max_connections: Option<u32>,
    ) -> Result<Arc<Self>> {
        let key = D::target_key(dsn, connect_timeout)?;
        let budget = max_connections.unwrap_or(D::DEFAULT_MAX_CONNECTIONS);
        let fits = |live: &Self| same_budget(max_connections, live.max_connections);
        registry.join_if(&key.clone(), fits, || {
            let board = Arc::new(WakeBoard::default());
            let OpenedTarget {
                pool,
                epoch,
                extra,
                changed_elsewhere,
            } = D::open_target(dsn, connect_timeout, &board, budget)?;
            Ok(Self {
                registry,
                key,
                pool,
                epoch,
                connect_timeout,
                max_connections: budget,
                secrets: dsn.secrets.clone(),
                board,
                hand_offs: ByQueue::default(),
                in_doubt: ByQueue::default(),
                pollers: TablePollers::following(changed_elsewhere),
                first_contact: FirstContact::default(),
                connection_failed_at: Mutex::new(None),
                recent_claims: RecentClaims::default(),
                claim_connection: KeptConnection::default(),
                ack_connection: KeptConnection::default(),
                send_connection: KeptConnection::default(),
                extra,
            })
        })
    }

    /// Called once by a closing queue; the last one out closes the target.
    pub async fn leave(self: &Arc<Self>) {
        if self.registry.leave(&self.key, self) {
            self.pollers.stop.cancel();
            D::close_target(&self.extra).await;
            self.claim_connection.give_back();
            self.ack_connection.give_back();
            self.send_connection.give_back();
            close_pool(&self.pool, POOL_CLOSE_BOUND).await;
        }
    }

    /// Where the shared statements with binds run.
    pub fn runner(&self) -> Runner<'_, D::Db> {
        Runner {
            pool: &self.pool,
            in_transaction: D::transaction_pooled(&self.extra),
        }
    }

    /// Whether the server has answered once (always, for an embedded database).
    pub fn reached(&self) -> bool {
        !D::FACTS.has_server || self.first_contact.reached()
    }

    /// Until the server has answered once, lets the dialect check the server on the pool's
    /// first connection; if that connection is not there within `PROBE_GRACE`, connects
    /// directly too (bounded by the connect timeout) so that an unreachable server fails soon
    /// with its real cause (the pool retries a refused port silently until its timeout).
    pub async fn ensure_reachable(&self, op: &str) -> Result<()> {
        D::before_first_contact(&self.extra).await;
        if !D::FACTS.has_server {
            return Ok(());
        }
        // Where the pool connects now (a DSN's hosts may have been looked over).
        let probe = self.pool.connect_options();
        let error = |err: &sqlx::Error| self.error(op, err);
        self.first_contact
            .ensure(|| async {
                // The pool's connection goes on opening whatever happens here (a pool connect
                // that fails gives up by itself: at once on a refusal by the server, within the
                // connect timeout on a refused port), so the first statement waits for one
                // connect, not two.
                let grace = PROBE_GRACE.min(self.connect_timeout / 4);
                let pool = self.pool.clone();
                let mut pooled = tokio::spawn(async move { pool.acquire().await });
                tokio::select! {
                    joined = &mut pooled => {
                        if let Ok(Ok(mut conn)) = joined {
                            let checked =
                                D::first_contact(&mut conn, &self.extra, &error).await;
                            // The operation that asked for first contact is next: it takes
                            // this connection instead of opening a second one.
                            if checked.is_ok() {
                                crate::engines::sql::driver::release_now(conn).await;
                            }
                            return checked;
                        }
                        // Refused (credentials, a database gone): the probe says why.
                    }
                    _ = tokio::time::sleep(grace) => {}
                }
                // The probe's bound ends where the connect timeout began: failures still
                // come within `connectTimeoutMs`.
                let bound = self.connect_timeout.saturating_sub(grace);
                let mut conn = match tokio::time::timeout(bound, probe.connect()).await {
                    Ok(Ok(conn)) => conn,
                    Ok(Err(err)) => return Err(self.error(op, &err)),
                    Err(_) => {
                        return Err(no_answer(
                            D::FACTS.label,
                            op,
                            self.connect_timeout,
                            &self.secrets,
                        ))
                    }
                };
                let checked = D::first_contact(&mut conn, &self.extra, &error).await;
                let _ = conn.close().await;
                checked
            })
            .await
    }

    /// A connection for a statement that must not run twice (a send): the last send's
    /// connection if it is kept, else a pooled one; checked with a ping first while pooled
    /// connections are suspect, so that a connection the server dropped is found out before
    /// the statement is sent, not after. Hand it to `send_connection.keep` once the send has
    /// completed.
    pub async fn acquire_for_write(&self) -> SqlResult<PoolConnection<D::Db>> {
        let suspect = self
            .connection_failed_at
            .locked()
            .is_some_and(|at| at.elapsed() < SUSPECT_WINDOW);
        let mut tries = 0;
        loop {
            let mut conn = self.send_connection.take(&self.pool).await?;
            if !suspect {
                return Ok(conn);
            }
            match tokio::time::timeout(self.connect_timeout, conn.ping()).await {
                Ok(Ok(())) => return Ok(conn),
                Ok(Err(_)) if tries < MAX_POOL_CONNECTIONS => conn.close_on_drop(),
                Ok(Err(err)) => return Err(err),
                Err(_) => {
                    conn.close_on_drop();
                    return Err(sqlx::Error::PoolTimedOut);
                }
            }
            tries += 1;
        }
    }

    /// Classifies a driver error as the dialect does, and notes an error that makes the
    /// connections opened before unfit (the pool then hands out none of them: a statement
    /// repeated after it connects anew). Handed to the retry policy as its classifier.
    pub fn classify(&self, err: &sqlx::Error) -> Failure {
        if let sqlx::Error::Database(db) = err {
            if D::unfits_connections(&self.extra, db.as_ref()) {
                self.epoch.mark();
                return Failure::Connection;
            }
        }
        D::classify(err)
    }

    /// Notes a failure: after a connection failure, pooled connections are suspect.
    pub fn note(&self, err: &sqlx::Error) {
        if D::classify(err) == Failure::Connection {
            D::connection_failed(&self.extra);
            *self.connection_failed_at.locked() = Some(Instant::now());
        }
    }

    /// A write's driver error as the user's error: when the connection failed after the
    /// statement may have reached the server, the error says the write may have been applied
    /// (it is not repeated blindly).
    pub fn write_error(&self, op: &str, what: &str, err: &sqlx::Error) -> Error {
        let mut error = self.error(op, err);
        if outcome_unknown(err, D::classify(err)) {
            error.message = format!(
                "{} (the connection was lost with the outcome unknown: {what} may have been stored; it was not sent again)",
                error.message
            );
        }
        error
    }

    /// A driver error as the user's error, classified by the dialect, secrets scrubbed.
    pub fn error(&self, op: &str, err: &sqlx::Error) -> Error {
        self.note(err);
        let detail = match err {
            sqlx::Error::PoolTimedOut => format!(
                "no connection could be obtained within {} ms (server unreachable or pool exhausted)",
                self.connect_timeout.as_millis()
            ),
            sqlx::Error::Database(db) => D::describe(db.as_ref()),
            other => other.to_string(),
        };
        driver_error(
            D::FACTS.label,
            op,
            self.classify(err),
            &detail,
            D::cause(err),
            &self.secrets,
        )
        .with_outcome(statement_outcome(err))
    }
}

impl<D: Connector> PollTarget for SqlTarget<D> {
    fn pollers(&self) -> &TablePollers {
        &self.pollers
    }

    fn board(&self) -> &WakeBoard {
        &self.board
    }

    /// On a server, on the connection claims keep (see `KeptConnection`): the claim a poll
    /// wakes finds it, and a poll every interval keeps no other connection open.
    fn fetch_due<'a>(
        &'a self,
        table: &'a str,
        names: &'a str,
    ) -> BoxFuture<'a, SqlResult<Vec<DueRow>>> {
        Box::pin(async move {
            if !D::FACTS.has_server {
                let mut conn = self.pool.acquire().await?;
                return D::poll_due(&mut conn, &self.extra, table, names).await;
            }
            let kept = &self.claim_connection;
            let mut conn = kept.take(&self.pool).await?;
            let rows = D::poll_due(&mut conn, &self.extra, table, names).await?;
            // Once the target closes, a kept connection would hold its pool's close.
            if !self.pollers.stop.is_cancelled() {
                kept.keep(conn);
            }
            Ok(rows)
        })
    }

    fn poll_bound(&self) -> Duration {
        self.connect_timeout + STATEMENT_BOUND
    }

    fn poll_failed(&self, err: &sqlx::Error) {
        self.note(err);
    }
}

/// Closes `pool` until no connection is left, for at most `bound`. One `Pool::close` is not
/// enough: a connection whose return to the pool (a ping, then back to the idle queue) was
/// under way while the close ran can land in the idle queue after the close's last look at
/// it, and would then stay open, idle, for as long as the pool lives.
pub async fn close_pool<DB: Database>(pool: &Pool<DB>, bound: Duration) {
    let until_empty = async {
        loop {
            pool.close().await;
            if pool.size() == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(bound, until_empty).await.ok();
}

/// The pool's share of a target's budget of `max_connections` once the dialect's `own`
/// connections (`own_is` says what they are) are set aside; a budget too small is refused.
pub fn pool_share(max_connections: u32, own: u32, own_is: &str) -> Result<u32> {
    match max_connections.checked_sub(own) {
        Some(pool) if pool >= MIN_POOL_CONNECTIONS => Ok(pool),
        _ => Err(Error::invalid_argument(format!(
            "maxConnections must be at least {} on this DSN: claims, acks and sends each keep a \
             connection between statements and one more serves the rest{own_is}; got \
             {max_connections}.",
            MIN_POOL_CONNECTIONS + own
        ))),
    }
}

/// The pool settings of a server dialect.
pub fn server_pool_options<DB: Database>(
    connect_timeout: Duration,
    max_connections: u32,
    epoch: Arc<ConnectionEpoch>,
) -> PoolOptions<DB> {
    PoolOptions::new()
        .max_connections(max_connections)
        // A ping before every use would double the round trips; only a connection that sat in
        // the pool for a while is pinged (below), and a broken one met in use is retried
        // (see with_transient_retry).
        .test_before_acquire(false)
        .before_acquire(
            move |conn: &mut DB::Connection, meta: PoolConnectionMetadata| {
                // Opened before a connection met a server that takes no writes (it may be to
                // the old writer still) or a pooler it was not ready for: closed, and the pool
                // connects anew, where the DSN's name points now.
                let stale = epoch.predates(meta.age);
                Box::pin(async move {
                    if stale {
                        return Ok(false);
                    }
                    if meta.idle_for < PING_IF_IDLE_FOR {
                        return Ok(true);
                    }
                    // A failed or unanswered ping closes this connection and the pool hands out
                    // another or opens one, before anything was written on it.
                    match tokio::time::timeout(connect_timeout, conn.ping()).await {
                        Ok(answered) => answered.map(|()| true),
                        Err(_) => Ok(false),
                    }
                })
            },
        )
        .min_connections(0)
        .acquire_timeout(connect_timeout)
        .idle_timeout(Duration::from_secs(60))
}

/// `options` with an `after_connect` hook that runs the dialect's session setup, if any. No
/// socket option is set on SQL connections: the driver opens its sockets itself and gives no
/// hold on them, and the addon changes nothing it cannot name as its own. Every wait on them
/// is bounded by a statement bound or a liveness check instead.
pub fn with_session_setup<DB: Database>(
    options: PoolOptions<DB>,
    session_setup: Option<&'static str>,
) -> PoolOptions<DB>
where
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
{
    match session_setup {
        None => options,
        Some(sql) => options.after_connect(move |conn, _meta| {
            Box::pin(async move {
                sqlx::Executor::execute(&mut *conn, sql).await?;
                Ok(())
            })
        }),
    }
}

/// An "Invalid SQL DSN" error that shows the DSN only in its redacted form.
pub fn invalid_dsn(dsn: &SqlDsn, cause: impl std::fmt::Display) -> Error {
    Error::connection(format!("Invalid SQL DSN \"{}\": {cause}", dsn.redacted))
        .redacted(&dsn.secrets)
}
