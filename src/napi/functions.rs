//! The exported functions: engine facts JavaScript asks for instead of keeping its own copy
//! (a DSN's dialect, the outbox INSERT, name checks), DSN redaction, and the live-queue count.

use crate::engines::sql;
use crate::queue;
use crate::support::{dsn, ident};

/// What JavaScript may know of the SQL dialect a DSN names, so that it keeps no copy of
/// these facts of its own.
#[napi(object)]
pub struct SqlDialectFacts {
    /// `postgres`, `mysql` or `sqlite`.
    pub dialect: String,
    /// The dialect's name in messages (`PostgreSQL`, `MySQL`, `SQLite`).
    pub label: String,
    /// Idle consumers can be woken by the database (`useNotify` applies).
    pub push_wakeup: bool,
}

/// Native queues alive in this process (created and not yet dropped): what a lifecycle
/// test watches to see closed transports let go.
#[napi(catch_unwind)]
pub fn live_native_queues() -> f64 {
    queue::live_queues() as f64
}

/// `dsn` with every password in it (userinfo, `password=` / `pass=` parameters) replaced
/// by `***`, exactly as the addon's own messages show it.
#[napi(catch_unwind)]
pub fn redact_dsn(dsn: String) -> String {
    dsn::redact_dsn(&dsn)
}

/// The facts of the SQL dialect a DSN names; throws for a bad DSN.
#[napi(catch_unwind)]
pub fn sql_dialect_of(dsn: String) -> napi::Result<SqlDialectFacts> {
    let facts = sql::facts_of(dsn::parse_sql_dsn(&dsn)?.dialect);
    Ok(SqlDialectFacts {
        dialect: facts.name.to_owned(),
        label: facts.label.to_owned(),
        push_wakeup: facts.push_wakeup,
    })
}

/// An outbox INSERT (see `crate::engines::sql::outbox`): text in the dialect's placeholders and the
/// names of the values each placeholder takes, in order.
#[napi(object)]
pub struct SqlOutboxStatement {
    pub text: String,
    /// `queue`, `body`, `headers`, `delayMs`, `delayMicros` or `channel`, per placeholder.
    pub values: Vec<String>,
}

/// The outbox INSERT for a table on the dialect a DSN names; throws for a bad DSN or name.
#[napi(catch_unwind)]
pub fn sql_outbox_statement(
    dsn: String,
    table_name: String,
    use_notify: bool,
) -> napi::Result<SqlOutboxStatement> {
    let dialect = dsn::parse_sql_dsn(&dsn)?.dialect;
    let statement = sql::outbox::outbox_statement(dialect, &table_name, use_notify)?;
    Ok(SqlOutboxStatement {
        text: statement.text,
        values: statement
            .values
            .iter()
            .map(|v| v.name().to_owned())
            .collect(),
    })
}

/// Checks a table name and a queue name as `SqlTransport` takes them; throws an
/// invalid-argument error naming the limit that was broken.
#[napi(catch_unwind)]
pub fn check_sql_names(table_name: String, queue_name: String) -> napi::Result<()> {
    ident::validate_table_name(&table_name)?;
    ident::validate_queue_name(&queue_name)?;
    Ok(())
}
