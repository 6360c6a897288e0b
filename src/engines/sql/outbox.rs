//! The transactional outbox: the one-row INSERT an app runs with its own client inside its own
//! transaction, so that a message is stored if and only if the app's data commits. It writes
//! exactly the row a `send()` writes (same columns, delay on the database clock, the same
//! NOTIFY on PostgreSQL, which the server delivers at commit and never before), so native and
//! upstream workers consume it alike.

use crate::support::dsn::Dialect;
use crate::support::error::Result;
use crate::support::ident;

/// What each placeholder of an outbox statement takes, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutboxValue {
    /// The queue name.
    Queue,
    /// The encoded body.
    Body,
    /// The encoded headers (one JSON string).
    Headers,
    /// The delay in milliseconds (a float).
    DelayMs,
    /// The delay in whole microseconds (an integer).
    DelayMicros,
    /// The NOTIFY channel (the table name, as `send()` uses it).
    Channel,
}

impl OutboxValue {
    /// The name JavaScript fills the value by.
    pub fn name(self) -> &'static str {
        match self {
            Self::Queue => "queue",
            Self::Body => "body",
            Self::Headers => "headers",
            Self::DelayMs => "delayMs",
            Self::DelayMicros => "delayMicros",
            Self::Channel => "channel",
        }
    }
}

/// An outbox statement: text in the dialect's own placeholders, and what each one takes.
pub struct OutboxStatement {
    pub text: String,
    pub values: &'static [OutboxValue],
}

/// The outbox INSERT for `table` in `dialect`; `notify` as the transport's `useNotify`.
pub fn outbox_statement(dialect: Dialect, table: &str, notify: bool) -> Result<OutboxStatement> {
    ident::validate_table_name(table)?;
    use OutboxValue::*;
    Ok(match dialect {
        Dialect::Postgres => {
            let insert = format!(
                "INSERT INTO {table} (queue_name, body, headers, available_at) \
                 VALUES ($1::text, $2::text, $3::text, now() + make_interval(secs => $4::float8 / 1000)) \
                 RETURNING id"
            );
            if notify {
                OutboxStatement {
                    text: format!(
                        "WITH ins AS ({insert}), notified AS MATERIALIZED (SELECT pg_notify($5::text, $1::text)) \
                         SELECT ins.id::text AS id FROM ins CROSS JOIN notified"
                    ),
                    values: &[Queue, Body, Headers, DelayMs, Channel],
                }
            } else {
                OutboxStatement {
                    text: format!("WITH ins AS ({insert}) SELECT ins.id::text AS id FROM ins"),
                    values: &[Queue, Body, Headers, DelayMs],
                }
            }
        }
        Dialect::MySql => OutboxStatement {
            text: format!(
                "INSERT INTO {table} (queue_name, body, headers, created_at, available_at) \
                 VALUES (?, ?, ?, NOW(3), NOW(3) + INTERVAL ? MICROSECOND)"
            ),
            values: &[Queue, Body, Headers, DelayMicros],
        },
        Dialect::Sqlite => OutboxStatement {
            text: format!(
                "INSERT INTO {table} (queue_name, body, headers, created_at, available_at) \
                 VALUES (?, ?, ?, strftime('%Y-%m-%d %H:%M:%f', 'now'), \
                 strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', ? / 1000.0)))"
            ),
            values: &[Queue, Body, Headers, DelayMs],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placeholders(text: &str, dialect: Dialect) -> usize {
        match dialect {
            Dialect::Postgres => (1..10)
                .filter(|n| text.contains(&format!("${n}::")))
                .count(),
            _ => text.matches('?').count(),
        }
    }

    #[test]
    fn every_statement_has_one_value_per_placeholder() {
        for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            for notify in [false, true] {
                let statement = outbox_statement(dialect, "messenger_messages", notify).unwrap();
                assert_eq!(
                    placeholders(&statement.text, dialect),
                    statement.values.len(),
                    "{dialect:?} notify={notify}: {}",
                    statement.text
                );
            }
        }
    }

    #[test]
    fn notify_only_on_postgres_and_only_when_asked() {
        let pg = outbox_statement(Dialect::Postgres, "t", true).unwrap();
        assert!(pg.text.contains("pg_notify($5::text, $1::text)"));
        assert!(!outbox_statement(Dialect::Postgres, "t", false)
            .unwrap()
            .text
            .contains("pg_notify"));
        assert!(!outbox_statement(Dialect::MySql, "t", true)
            .unwrap()
            .text
            .contains("notify"));
    }

    #[test]
    fn a_table_name_outside_the_allowlist_is_refused() {
        assert!(outbox_statement(Dialect::Postgres, "t; DROP TABLE x", false).is_err());
    }
}
