//! PostgreSQL's driver errors in the shared [`Failure`] kinds, by SQLSTATE.

use crate::engines::sql::errors::Failure;
use crate::support::error::Cause;
use sqlx::error::DatabaseError;

/// SQLSTATE classes: 08 connection, 57P shutdown/cannot connect; 28 authorization and 3D000
/// unknown database (refused for good); 42P01 undefined table; 40001/40P01 serialization
/// failure/deadlock; 25006 a read-only server (see [`refuses_writes`]): a connection to
/// replace.
/// The server takes no writes (SQLSTATE 25006, read_only_sql_transaction): a writer demoted
/// in place, or a standby the connection reached. It is no longer a writer for this DSN.
pub fn refuses_writes(db: &dyn DatabaseError) -> bool {
    db.code().as_deref() == Some("25006")
}

pub fn classify_database(db: &dyn DatabaseError) -> Failure {
    if refuses_writes(db) {
        return Failure::Connection;
    }
    match db.code().as_deref() {
        Some("42P01") => Failure::NotFound,
        Some("40001" | "40P01") => Failure::Transient,
        Some("3D000") => Failure::Refused,
        Some(code) if code.starts_with("28") => Failure::Refused,
        Some(code) if code.starts_with("08") || code.starts_with("57P") => Failure::Connection,
        _ => Failure::Other,
    }
}

/// As pg gives it: the SQLSTATE as `code`, the server's message.
pub fn cause(db: &dyn DatabaseError) -> Cause {
    Cause::new(db.code().as_deref(), db.message())
}

/// The server's message with its SQLSTATE. A prepared statement found missing (26000) or
/// already there (42P05) is what the driver's named statements meet through a transaction
/// pooler the DSN says is not one (`pgbouncer=false`): the message says what to change.
pub fn describe(db: &dyn DatabaseError) -> String {
    match db.code().as_deref() {
        Some(code) if super::pooler::is_prepared_statement_error(db) => format!(
            "{} (SQLSTATE {code}). A pooler in transaction mode (PgBouncer's pool_mode = transaction) does not keep prepared statements: if this DSN goes through one, say pgbouncer=true in it.",
            db.message()
        ),
        Some(code) => format!("{} (SQLSTATE {code})", db.message()),
        None => db.message().to_owned(),
    }
}
