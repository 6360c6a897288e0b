//! SQLite's driver errors in the shared [`Failure`] kinds, by result code.

use crate::sql::errors::Failure;
use sqlx::error::DatabaseError;

/// SQLite result codes: 5 BUSY, 6 LOCKED (and their extended forms), 14 CANTOPEN, 26 NOTADB.
pub fn classify_database(db: &dyn DatabaseError) -> Failure {
    if db.message().starts_with("no such table") {
        return Failure::NotFound;
    }
    let code: i64 = db.code().and_then(|c| c.parse().ok()).unwrap_or(0);
    match code & 0xff {
        5 | 6 => Failure::Transient,
        14 | 26 => Failure::Connection,
        _ => Failure::Other,
    }
}
/// SQLite's message with its result code.
pub fn describe(db: &dyn DatabaseError) -> String {
    match db.code() {
        Some(code) => format!("{} (code {code})", db.message()),
        None => db.message().to_owned(),
    }
}
