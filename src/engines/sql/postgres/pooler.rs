//! A DSN that goes through PgBouncer (or another pooler) in transaction mode, said by its
//! `pgbouncer=true` parameter (Prisma's name for the same thing).
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

use crate::queue::stats::{Counters, Level};
use std::sync::{Mutex, Weak};

/// The DSN parameter, as Prisma spells it.
pub const PARAMETER: &str = "pgbouncer";

/// Whether `driver_url` says it goes through a transaction pooler; an error names a value that
/// is neither `true` nor `false`.
pub fn transaction_pooled(driver_url: &str) -> Result<bool, String> {
    let Ok(url) = url::Url::parse(driver_url) else {
        return Ok(false);
    };
    let mut pooled = false;
    for (key, value) in url.query_pairs() {
        if key != PARAMETER {
            continue;
        }
        pooled = match value.as_ref() {
            "true" => true,
            "false" => false,
            other => {
                return Err(format!(
                    "{PARAMETER} must be true or false, got \"{other}\""
                ))
            }
        };
    }
    Ok(pooled)
}

/// Tells each queue's logger once that its idle consumers poll: a transaction-pooled DSN with
/// `useNotify` on and no `listenDsn` has no LISTEN connection. Told at a queue's first idle
/// wait, not when it opens, so that a logger attached to the new transport hears it.
#[derive(Default)]
pub struct PollingNotice {
    untold: Mutex<Vec<Weak<Counters>>>,
}

pub const POLLING: &str = "The DSN goes through PgBouncer in transaction mode (pgbouncer=true), which cannot carry LISTEN: idle consumers poll every pollIntervalMs. Give a direct DSN to the database as listenDsn to have them woken by NOTIFY.";

impl PollingNotice {
    pub fn watch(&self, counters: &std::sync::Arc<Counters>) {
        lock(&self.untold).push(std::sync::Arc::downgrade(counters));
    }

    pub fn tell(&self) {
        let untold = std::mem::take(&mut *lock(&self.untold));
        for counters in untold.iter().filter_map(Weak::upgrade) {
            counters.report(Level::Log, POLLING);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pgbouncer_true_says_transaction_pooled() {
        for (url, pooled) in [
            ("postgres://u@h:6432/db?pgbouncer=true", true),
            (
                "postgres://u@h:6432/db?sslmode=disable&pgbouncer=true",
                true,
            ),
            ("postgres://u@h:6432/db?pgbouncer=false", false),
            ("postgres://u@h:6432/db", false),
        ] {
            assert_eq!(transaction_pooled(url), Ok(pooled), "{url}");
        }
        let refused = transaction_pooled("postgres://u@h/db?pgbouncer=yes").unwrap_err();
        assert!(refused.contains("\"yes\""), "{refused}");
    }
}
