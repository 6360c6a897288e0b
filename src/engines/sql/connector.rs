//! The connection side of a SQL dialect, at the bottom of the engine: what a dialect's
//! connections are ([`Connector::Db`]), how it opens a connection target ([`OpenedTarget`]) and
//! checks a server on first contact, what identifies a target, its statements' types and text,
//! its shared poll statement, and how it classifies and describes its driver errors. The queue
//! side (insert, claim, release, …) is [`super::dialect::SqlDialect`], above the target.
//!
//! Imports only the driver ([`super::driver`]) and the shared failure kinds
//! ([`super::errors`]): it names no connection target and no queue, so that the target
//! (`super::target`) can be written over this trait.

use super::driver::{Driver, DueRow, SqlResult};
use super::errors::Failure;
use crate::queue::wake::WakeBoard;
use crate::support::dsn::SqlDsn;
use crate::support::error::{Cause, Error, Result};
use futures_util::future::BoxFuture;
use sqlx::database::Database;
use sqlx::error::DatabaseError;
use sqlx::Pool;
use std::sync::Arc;
use std::time::Duration;

/// The driver connection of a dialect.
pub type DialectConnection<C> = <<C as Connector>::Db as Database>::Connection;

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
    /// Idle consumers of a table that are not woken by the database (no push wake-up, or it
    /// is off or down) share one poll per interval ([`Connector::poll_due`]).
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
pub struct OpenedTarget<C: Connector> {
    pub pool: Pool<C::Db>,
    /// When the pool's connections last met a server that takes no writes.
    pub epoch: Arc<super::connection_epoch::ConnectionEpoch>,
    pub extra: C::Extra,
    /// What the dialect moves when another process may have changed the tables (see
    /// `TablePollers::changed_elsewhere`); nothing moves it by default.
    pub changed_elsewhere: Arc<crate::queue::wake::WakeSignal>,
}

/// Turns a driver error met on first contact into the user's error for the operation that
/// asked for it (classified, secrets scrubbed, noted by the target).
pub type ContactError<'a> = &'a (dyn Fn(&sqlx::Error) -> Error + Sync);

pub trait Connector: Sized + Send + Sync + 'static {
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

    /// Connections a process opens to one DSN when no transport says (`maxConnections`).
    const DEFAULT_MAX_CONNECTIONS: u32;

    /// Builds a target's pool (lazily: no connection is opened here), every connection it may
    /// open (the pool's and any of the dialect's own) within `max_connections`; a budget too
    /// small for what the dialect keeps open is refused.
    fn open_target(
        dsn: &SqlDsn,
        connect_timeout: Duration,
        board: &Arc<WakeBoard>,
        max_connections: u32,
    ) -> Result<OpenedTarget<Self>>;

    /// Checks the server on the first connection made to it (version, limits), noting what
    /// it learns in the target's `extra`; its driver errors go through `error`.
    fn first_contact<'a>(
        _conn: &'a mut DialectConnection<Self>,
        _extra: &'a Self::Extra,
        _error: ContactError<'a>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Runs before first contact, every time it is asked for (a dialect does its part once).
    fn before_first_contact(_extra: &Self::Extra) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Hears that a connection failed (lost, refused, unanswered).
    fn connection_failed(_extra: &Self::Extra) {}

    /// Whether the target's DSN goes through a transaction pooler: its statements with binds
    /// then each run in a transaction of their own (see `super::driver::rows_on`).
    fn transaction_pooled(_extra: &Self::Extra) -> bool {
        false
    }

    /// Lets go of the dialect's own per-target resources when the last queue closes.
    fn close_target(_extra: &Self::Extra) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// The statements of one table (already allowlisted).
    fn statements(table: &str, notify: bool) -> (TableStatements, Self::Statements);

    /// With [`DialectFacts::shared_poll`]: the one statement that tells, for each queue its one
    /// parameter names (a JSON array of names) that has rows in `table`, when its next row is
    /// due, as `(queue_name, free_ms, held_ms)` rows (see [`super::driver::DueRow`]). A
    /// dialect whose statement depends on the table's catalog writes [`Connector::poll_due`]
    /// instead.
    fn due_by_queue(_table: &str) -> String {
        String::new()
    }

    /// Runs the shared poll of `table` for the queues `names` lists (a JSON array), on `conn`
    /// (one attempt).
    fn poll_due<'a>(
        conn: &'a mut DialectConnection<Self>,
        extra: &'a Self::Extra,
        table: &'a str,
        names: &'a str,
    ) -> BoxFuture<'a, SqlResult<Vec<DueRow>>> {
        Box::pin(async move {
            let sql = Self::due_by_queue(table);
            Self::Db::fetch_due(conn, &sql, names, Self::transaction_pooled(extra)).await
        })
    }

    /// A server error in the shared kinds, by the dialect's own codes.
    fn classify_database(err: &dyn DatabaseError) -> Failure;

    /// Whether a server error makes every connection opened before it unfit: the server takes
    /// no writes (a writer turned read-only, a standby: the connection is no longer to the
    /// DSN's writer), or the connections were made for a server that is not the one in front
    /// (a pooler found out late). The statement did not run: it is repeated on a new one.
    fn unfits_connections(_extra: &Self::Extra, _err: &dyn DatabaseError) -> bool {
        false
    }

    /// Any driver error in the shared kinds.
    fn classify(err: &sqlx::Error) -> Failure {
        super::errors::classify_with(err, Self::classify_database)
    }

    /// A server error in the dialect's words (with its code).
    fn describe(err: &dyn DatabaseError) -> String;

    /// A server error as the dialect's Node driver names it (pg's SQLSTATE, mysql2's `ER_*`
    /// with errno and SQLSTATE, better-sqlite3's `SQLITE_*`).
    fn database_cause(err: &dyn DatabaseError) -> Cause;

    /// Any driver error as the dialect's Node driver would have named it.
    fn cause(err: &sqlx::Error) -> Cause {
        super::errors::cause_with(err, Self::database_cause)
    }
}
