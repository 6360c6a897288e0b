//! What a SQL dialect provides to the table queue: its statements and DDL, its insert, claim
//! and reject (the parts whose SQL shape is its own), how it opens a connection target and
//! checks a server on first contact, and how it classifies its driver errors. Everything else
//! (list, find, count, leases, releases, idle waits, retries, shutdown) is written once in
//! [`super::TableQueue`] and [`super::SqlTarget`].
//!
//! Methods that run statements make one attempt and return the driver's error: the table
//! queue decides what is retried and how the error is reported.

use super::claim_doubt::ClaimAttempt;
use super::driver::{Driver, SqlResult};
use super::errors::Failure;
use super::ids::{held_condition, HeldRow};
use super::table_queue::TableQueue;
use super::target::SqlTarget;
use crate::queue::engine::{Held, NewMessage, StoredMessage};
use crate::queue::wake::WakeBoard;
use crate::support::dsn::SqlDsn;
use crate::support::error::Result;
use crate::support::targets::Targets;
use futures_util::future::BoxFuture;
use sqlx::database::Database;
use sqlx::error::DatabaseError;
use sqlx::{Connection, Pool};
use std::sync::Arc;
use std::time::Duration;

/// The driver connection of a dialect.
pub type DialectConnection<D> = <<D as SqlDialect>::Db as Database>::Connection;
/// Options that open one driver connection of a dialect.
pub type DialectConnectOptions<D> = <DialectConnection<D> as Connection>::Options;

/// Facts about a dialect that the layers above (and JavaScript) branch on, instead of on its
/// name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DialectFacts {
    /// Short name, as DSNs and JavaScript say it: `postgres`, `mysql`, `sqlite`.
    pub name: &'static str,
    /// Name in messages: `<label> transport failed during …`.
    pub label: &'static str,
    /// Idle consumers can be woken by the database itself (PostgreSQL LISTEN/NOTIFY).
    pub push_wakeup: bool,
    /// Idle consumers of a table share one poll per interval ([`SqlDialect::due_by_queue`]).
    pub shared_poll: bool,
    /// A server is contacted (an embedded database has nothing to probe).
    pub has_server: bool,
}

/// The statements every dialect writes in its own text with the same binds and columns:
/// - `next_due` (queue, lease seconds) → `wait_ms`: ms until the next unclaimed row is due;
/// - `list` (queue, limit) and `find` (id) → `(id, body, headers)` rows;
/// - `count` (queue, lease seconds) → `count`: claimable rows;
/// - `delete_head`: `DELETE … WHERE `, a held-row condition appended;
/// - `setup`: the script that creates the table and its index if missing (idempotent);
/// - `setup_done` → `count`: non-zero when the table and its index exist, so `setup` is not
///   run for nothing (on a server, running it asks for the right to create, and PostgreSQL's
///   takes a lock that waits for the table's writers).
pub struct TableStatements {
    pub setup: String,
    pub setup_done: Option<String>,
    pub next_due: String,
    pub list: String,
    pub find: String,
    pub count: String,
    pub delete_head: String,
}

/// A connection target as a dialect opens it: the shared pool, how to reach the server
/// directly on first contact (`None` for an embedded database), and the dialect's own state.
pub struct OpenedTarget<D: SqlDialect> {
    pub pool: Pool<D::Db>,
    pub probe: Option<DialectConnectOptions<D>>,
    pub extra: D::Extra,
}

pub trait SqlDialect: Sized + Send + Sync + 'static {
    type Db: Driver;
    /// Per-DSN state of the dialect's own (a listener, server limits read on first contact).
    type Extra: Send + Sync + 'static;
    /// The dialect's own statements, beside the shared-shape [`TableStatements`].
    type Statements: Send + Sync + 'static;

    const FACTS: DialectFacts;

    /// The claim token of a row: its `delivered_at` as whole microseconds, exactly, in SQL.
    /// Every claim and renewal sets `delivered_at`, so the value a claim set identifies it
    /// (the shared schema has no other column to fence with).
    const TOKEN_OF: &'static str;

    /// The process-wide registry of this dialect's targets (one per DSN).
    fn targets() -> &'static Targets<SqlTarget<Self>>;

    /// What identifies a target: the driver URL and the connect timeout the pool was made
    /// with (a transport with other settings gets a pool of its own, not the first one's),
    /// unless the dialect knows better.
    fn target_key(dsn: &SqlDsn, connect_timeout: Duration) -> Result<String> {
        Ok(format!(
            "{} connect_timeout_ms={}",
            dsn.driver_url,
            connect_timeout.as_millis()
        ))
    }

    /// Builds a target's pool (lazily: no connection is opened here).
    fn open_target(
        dsn: &SqlDsn,
        connect_timeout: Duration,
        board: &Arc<WakeBoard>,
    ) -> Result<OpenedTarget<Self>>;

    /// Checks the server on the first connection made to it (version, limits).
    fn first_contact<'a>(
        _conn: &'a mut DialectConnection<Self>,
        _target: &'a SqlTarget<Self>,
        _op: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Whether the target's DSN goes through a transaction pooler: its statements with binds
    /// then each run in a transaction of their own (see `super::driver::rows_on`).
    fn transaction_pooled(_extra: &Self::Extra) -> bool {
        false
    }

    /// Lets go of the dialect's own per-target resources when the last queue closes.
    fn close_target(_target: &SqlTarget<Self>) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// The statements of one table (already allowlisted).
    fn statements(table: &str, notify: bool) -> (TableStatements, Self::Statements);

    /// With [`DialectFacts::shared_poll`]: the one statement that tells, for each of `queues`
    /// (a non-empty list) that has rows in `table`, when its next row is due, as
    /// `(queue_name, free_ms, held_ms)` rows (see [`super::driver::DueRow`]).
    fn due_by_queue(_table: &str, _queues: &[&str]) -> String {
        String::new()
    }

    /// A server error in the shared kinds, by the dialect's own codes.
    fn classify_database(err: &dyn DatabaseError) -> Failure;

    /// Any driver error in the shared kinds.
    fn classify(err: &sqlx::Error) -> Failure {
        super::errors::classify_with(err, Self::classify_database)
    }

    /// A server error in the dialect's words (with its code).
    fn describe(err: &dyn DatabaseError) -> String;

    /// A server error as the dialect's Node driver names it (pg's SQLSTATE, mysql2's `ER_*`
    /// with errno and SQLSTATE, better-sqlite3's `SQLITE_*`).
    fn database_cause(err: &dyn DatabaseError) -> crate::support::error::Cause;

    /// Any driver error as the dialect's Node driver would have named it.
    fn cause(err: &sqlx::Error) -> crate::support::error::Cause {
        super::errors::cause_with(err, Self::database_cause)
    }

    /// Hands a queue's counters to what the dialect runs for many queues (PostgreSQL's LISTEN
    /// connection), so a logger hears when it is lost and back.
    fn watch(_queue: &TableQueue<Self>, _counters: &Arc<crate::queue::stats::Counters>) {}

    /// Whether push wake-ups are live right now for this queue.
    fn push_ready(_queue: &TableQueue<Self>) -> bool {
        false
    }

    /// Refuses, before it is queued, a message the server is known to be unable to take.
    fn check_message(_queue: &TableQueue<Self>, _message: &NewMessage) -> Result<()> {
        Ok(())
    }

    /// Stores a batch and returns the new ids in input order; owns its retry policy, since
    /// only the dialect knows whether its statement can have run when it failed.
    fn insert(
        queue: &TableQueue<Self>,
        messages: Vec<NewMessage>,
    ) -> BoxFuture<'_, Result<Vec<String>>>;

    /// Claims up to `limit` due rows, oldest first, each with its claim's token, noting in
    /// `attempt` what identifies them should the reply be lost (see [`super::claim_doubt`]).
    fn claim<'a>(
        queue: &'a TableQueue<Self>,
        limit: u32,
        attempt: &'a mut ClaimAttempt,
    ) -> BoxFuture<'a, SqlResult<Vec<StoredMessage>>>;

    /// Releases the rows a claim whose reply was lost may have taken: by default those it
    /// noted ([`ClaimAttempt::hold`]) while their claim is still its.
    fn release_in_doubt<'a>(
        queue: &'a TableQueue<Self>,
        attempt: &'a ClaimAttempt,
    ) -> BoxFuture<'a, SqlResult<()>> {
        let rows = attempt.held();
        if rows.is_empty() {
            return Box::pin(async { Ok(()) });
        }
        Self::release(queue, held_condition(rows, Self::TOKEN_OF))
    }

    /// Atomically replaces row `id` by `copy`; `None` if it was gone, or if `token` is given
    /// and the row's claim is no longer that one.
    fn redeliver<'a>(
        queue: &'a TableQueue<Self>,
        id: i64,
        token: Option<i64>,
        copy: &'a NewMessage,
    ) -> BoxFuture<'a, SqlResult<Option<String>>>;

    /// Makes the rows `condition` matches claimable again at once.
    fn release(queue: &TableQueue<Self>, condition: String) -> BoxFuture<'_, SqlResult<()>>;

    /// Renews the claims on `rows` that are still theirs (their tokens match); returns the
    /// renewed rows with their new tokens. One attempt: a renewal changes tokens, so it is
    /// never repeated blindly.
    fn renew(queue: &TableQueue<Self>, rows: Vec<HeldRow>) -> BoxFuture<'_, SqlResult<Vec<Held>>>;
}

/// A renewal in one `UPDATE … RETURNING`: `head` is `UPDATE … SET delivered_at = <now> WHERE
/// delivered_at IS NOT NULL AND `.
pub fn renew_returning<'a, D: SqlDialect>(
    queue: &'a TableQueue<D>,
    head: &str,
    rows: &[HeldRow],
) -> BoxFuture<'a, SqlResult<Vec<Held>>> {
    let sql = format!(
        "{head}{} RETURNING CAST(id AS TEXT) AS id, {} AS token",
        held_condition(rows, D::TOKEN_OF),
        D::TOKEN_OF
    );
    D::Db::fetch_held(&queue.target.pool, sql)
}
