//! A DSN that goes through PgBouncer (or another pooler) in transaction mode: said by its
//! `pgbouncer=true` parameter (Prisma's name for the same thing), or found out on the first
//! connection when the DSN says nothing.
//!
//! Such a pooler lends a server connection for one transaction at a time, and a statement
//! outside a transaction is one. The driver runs a statement with binds in two exchanges, its
//! Parse and then its Bind and Execute, each closed by a Sync: between the two the pooler may
//! lend the server connection to another client and hand this one another, where the statement
//! does not exist (or another client's unnamed statement does). So each statement with binds
//! runs unnamed inside a transaction of its own (`driver::rows_on`), which keeps one server
//! connection from its Parse to its commit. Nothing may rest on session state either: no
//! session settings on connect, and no LISTEN through the pooler (it would listen on a server
//! connection lent to others a moment later): the LISTEN connection goes to `listenDsn`, or
//! idle consumers poll.
//!
//! Session mode needs none of this: a client keeps its server connection for its whole life.
//!
//! Found out on first contact by the backends that answer (see [`Pooler::look`]): two sessions
//! of a server never share a backend, and a session never changes backend; through a
//! transaction pooler, two client connections are lent the same one, or one is lent another
//! between statements. A server that says it answers on the DSN's own loopback address and
//! port is taken at its word, and costs no second connection.
//! Should a pooler escape that, its first prepared-statement error (42P05, 26000) says it: the
//! statement did not run, and is repeated on a new connection, pooler-safe.

use super::session_defaults::{is_loopback, SESSION_SETUP};
use crate::queue::stats::{Counters, Level};
use crate::support::locks::Locked;
use sqlx::error::DatabaseError;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sqlx::{Executor, Row};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Weak};
use tokio::sync::OnceCell;

/// The DSN parameter, as Prisma spells it.
pub const PARAMETER: &str = "pgbouncer";

/// Whether `driver_url` says it goes through a transaction pooler (`Some(true)`), says it does
/// not (`Some(false)`: nothing is detected), or is silent; an error names a value that is
/// neither `true` nor `false`.
pub fn said_pooled(driver_url: &str) -> Result<Option<bool>, String> {
    let Ok(url) = url::Url::parse(driver_url) else {
        return Ok(None);
    };
    let mut said = None;
    for (key, value) in url.query_pairs() {
        if key != PARAMETER {
            continue;
        }
        said = Some(match value.as_ref() {
            "true" => true,
            "false" => false,
            other => {
                return Err(format!(
                    "{PARAMETER} must be true or false, got \"{other}\""
                ))
            }
        });
    }
    Ok(said)
}

/// What a target knows of the pooler in front of its server.
pub struct Pooler {
    /// The DSN's `pgbouncer` parameter, if it has one.
    said: Option<bool>,
    /// Found out on first contact (only when the DSN is silent).
    detected: AtomicBool,
    /// First contact's look, run once: until it has, no session setting is made (the
    /// connection may be a pooler's, lent to others next).
    looked: OnceCell<()>,
    /// Whether the DSN names a loopback host, and its port: a server that says it answers
    /// there is not behind a pooler, and is not looked at further.
    loopback_port: Option<u16>,
    /// Queues told once that their idle consumers poll.
    polling: PollingNotice,
}

impl Pooler {
    pub fn new(said: Option<bool>, options: &PgConnectOptions) -> Self {
        let on_loopback = options.get_socket().is_none() && is_loopback(options.get_host());
        let loopback_port = on_loopback.then(|| options.get_port());
        Self {
            said,
            detected: AtomicBool::new(false),
            looked: OnceCell::new(),
            loopback_port,
            polling: PollingNotice::default(),
        }
    }

    /// Whether statements with binds each need a transaction of their own, and nothing may
    /// rest on session state.
    pub fn transaction_pooled(&self) -> bool {
        self.said
            .unwrap_or_else(|| self.detected.load(Ordering::Relaxed))
    }

    /// Whether the DSN said so (else it was found out).
    pub fn said(&self) -> bool {
        self.said == Some(true)
    }

    /// Run on each new connection of the target's pool: the session setup, once it is known
    /// that no transaction pooler is in between.
    pub async fn on_connect(&self, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        let known = self.said.is_some() || self.looked.initialized();
        if known && !self.transaction_pooled() {
            conn.execute(SESSION_SETUP).await?;
        }
        Ok(())
    }

    /// On first contact, when the DSN is silent: finds out whether a transaction pooler is in
    /// between (see [`Pooler::look`]). A look that fails finds nothing (the error fallback of
    /// [`Pooler::hears`] remains).
    pub async fn first_contact(&self, conn: &mut PgConnection, pool: &PgPool) {
        if self.said.is_some() {
            return;
        }
        self.looked
            .get_or_init(|| async {
                let mut other = None;
                if let Ok(true) = self.look(conn, pool, &mut other).await {
                    self.found();
                }
                // The connections opened before the look had no session setup: the first, and
                // the look's second (back in the pool for what comes next).
                if !self.transaction_pooled() {
                    let _ = conn.execute(SESSION_SETUP).await;
                    if let Some(other) = other.as_mut() {
                        let _ = other.execute(SESSION_SETUP).await;
                    }
                }
            })
            .await;
    }

    /// Asks `conn`'s backend where it answers: on the DSN's own loopback port, nothing is in
    /// between. Else, a few times over, asks a second connection's backend (while `conn` is
    /// open), then `conn`'s again. On a server the answers name two backends, `conn`'s always
    /// the same; through a transaction pooler the second connection is lent the backend
    /// `conn` just gave back (poolers hand out the last one returned first), or `conn` is lent
    /// another. Other clients' traffic can hide either in one round, not in all of them.
    async fn look(
        &self,
        conn: &mut PgConnection,
        pool: &PgPool,
        other: &mut Option<PoolConnection<sqlx::Postgres>>,
    ) -> Result<bool, sqlx::Error> {
        let row = conn
            .fetch_one("SELECT pg_backend_pid(), inet_server_port(), host(inet_server_addr())")
            .await?;
        let first: i32 = row.try_get(0)?;
        let port: Option<i32> = row.try_get(1)?;
        let address: Option<String> = row.try_get(2)?;
        let answers_here = self.loopback_port.is_some_and(|dsn_port| {
            port == Some(i32::from(dsn_port)) && address.as_deref().is_some_and(is_loopback)
        });
        if answers_here {
            return Ok(false);
        }
        let second_conn = other.insert(pool.acquire().await?);
        for _ in 0..LOOKS {
            let second = backend_of(second_conn).await?;
            let again = backend_of(conn).await?;
            if second == first || again != first {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn found(&self) {
        self.detected.store(true, Ordering::Relaxed);
    }

    /// Hears a server error: a prepared statement found missing or already there is what the
    /// driver's named statements meet through a transaction pooler the detection missed.
    /// Returns whether it was that (the statement did not run, and the connections opened
    /// before hold statements that are not theirs).
    pub fn hears(&self, db: &dyn DatabaseError) -> bool {
        if self.said.is_some() || !is_prepared_statement_error(db) {
            return false;
        }
        self.found();
        true
    }

    /// Tells `counters` (a queue's) once, at its first idle wait, that idle consumers poll.
    pub fn watch(&self, counters: &std::sync::Arc<Counters>) {
        self.polling.watch(counters);
    }

    /// Tells the watching queues that their idle consumers poll, and why.
    pub fn tell_polling(&self) {
        let why = if self.said() { SAID } else { FOUND };
        self.polling.tell(why);
    }
}

/// The backend process answering on `conn` (a simple query: it prepares nothing).
async fn backend_of(conn: &mut PgConnection) -> Result<i32, sqlx::Error> {
    let row = conn.fetch_one("SELECT pg_backend_pid()").await?;
    row.try_get(0)
}

/// A prepared statement missing (26000) or already there (42P05), or binds that do not fit
/// the statement of that name (22P03, 08P01): through a transaction pooler, the driver's
/// named statements meet other clients' server connections.
pub fn is_prepared_statement_error(db: &dyn DatabaseError) -> bool {
    let message = db.message();
    match db.code().as_deref() {
        Some("26000" | "42P05") => message.contains("prepared statement"),
        Some("22P03") => message.contains("bind parameter"),
        Some("08P01") => message.contains("bind message"),
        _ => false,
    }
}

/// Rounds of the look at the backends.
const LOOKS: usize = 5;

const SAID: &str = "The DSN goes through PgBouncer in transaction mode (pgbouncer=true), which cannot carry LISTEN: idle consumers poll every pollIntervalMs. Give a direct DSN to the database as listenDsn to have them woken by NOTIFY.";
const FOUND: &str = "The DSN goes through a pooler in transaction mode (found on connecting: two connections shared a server backend), which cannot carry LISTEN: idle consumers poll every pollIntervalMs. Give a direct DSN to the database as listenDsn to have them woken by NOTIFY.";

/// Tells each queue's logger once that its idle consumers poll: a transaction-pooled DSN with
/// `useNotify` on and no `listenDsn` has no LISTEN connection. Told at a queue's first idle
/// wait, not when it opens, so that a logger attached to the new transport hears it.
#[derive(Default)]
struct PollingNotice {
    untold: Mutex<Vec<Weak<Counters>>>,
}

impl PollingNotice {
    fn watch(&self, counters: &std::sync::Arc<Counters>) {
        self.untold
            .locked()
            .push(std::sync::Arc::downgrade(counters));
    }

    fn tell(&self, why: &str) {
        let untold = std::mem::take(&mut *self.untold.locked());
        for counters in untold.iter().filter_map(Weak::upgrade) {
            counters.report(Level::Log, why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pgbouncer_parameter_says_pooled_or_not() {
        for (url, said) in [
            ("postgres://u@h:6432/db?pgbouncer=true", Some(true)),
            (
                "postgres://u@h:6432/db?sslmode=disable&pgbouncer=true",
                Some(true),
            ),
            ("postgres://u@h:6432/db?pgbouncer=false", Some(false)),
            ("postgres://u@h:6432/db", None),
        ] {
            assert_eq!(said_pooled(url), Ok(said), "{url}");
        }
        let refused = said_pooled("postgres://u@h/db?pgbouncer=yes").unwrap_err();
        assert!(refused.contains("\"yes\""), "{refused}");
    }
}
