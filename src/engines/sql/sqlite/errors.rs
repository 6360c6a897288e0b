//! SQLite's driver errors in the shared [`Failure`] kinds, by result code.

use crate::engines::sql::errors::Failure;
use crate::support::error::Cause;
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

/// Primary result codes 1..=28 by number, as better-sqlite3 names them.
const PRIMARY_NAMES: [&str; 28] = [
    "SQLITE_ERROR",
    "SQLITE_INTERNAL",
    "SQLITE_PERM",
    "SQLITE_ABORT",
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_NOMEM",
    "SQLITE_READONLY",
    "SQLITE_INTERRUPT",
    "SQLITE_IOERR",
    "SQLITE_CORRUPT",
    "SQLITE_NOTFOUND",
    "SQLITE_FULL",
    "SQLITE_CANTOPEN",
    "SQLITE_PROTOCOL",
    "SQLITE_EMPTY",
    "SQLITE_SCHEMA",
    "SQLITE_TOOBIG",
    "SQLITE_CONSTRAINT",
    "SQLITE_MISMATCH",
    "SQLITE_MISUSE",
    "SQLITE_NOLFS",
    "SQLITE_AUTH",
    "SQLITE_FORMAT",
    "SQLITE_RANGE",
    "SQLITE_NOTADB",
    "SQLITE_NOTICE",
    "SQLITE_WARNING",
];

/// The extended result codes a queue meets (busy and locked files, read-only files, files
/// that cannot be opened, constraints); any other is named by its primary code.
const EXTENDED_NAMES: &[(i64, &str)] = &[
    (261, "SQLITE_BUSY_RECOVERY"),
    (517, "SQLITE_BUSY_SNAPSHOT"),
    (773, "SQLITE_BUSY_TIMEOUT"),
    (262, "SQLITE_LOCKED_SHAREDCACHE"),
    (264, "SQLITE_READONLY_RECOVERY"),
    (520, "SQLITE_READONLY_CANTLOCK"),
    (776, "SQLITE_READONLY_ROLLBACK"),
    (1032, "SQLITE_READONLY_DBMOVED"),
    (1288, "SQLITE_READONLY_CANTINIT"),
    (1544, "SQLITE_READONLY_DIRECTORY"),
    (270, "SQLITE_CANTOPEN_NOTEMPDIR"),
    (526, "SQLITE_CANTOPEN_ISDIR"),
    (782, "SQLITE_CANTOPEN_FULLPATH"),
    (275, "SQLITE_CONSTRAINT_CHECK"),
    (787, "SQLITE_CONSTRAINT_FOREIGNKEY"),
    (1299, "SQLITE_CONSTRAINT_NOTNULL"),
    (1555, "SQLITE_CONSTRAINT_PRIMARYKEY"),
    (2067, "SQLITE_CONSTRAINT_UNIQUE"),
    (2579, "SQLITE_CONSTRAINT_ROWID"),
];

/// The name better-sqlite3 gives a (possibly extended) result code.
pub fn code_name(code: i64) -> Option<&'static str> {
    EXTENDED_NAMES
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, name)| *name)
        .or_else(|| {
            let primary = usize::try_from(code & 0xff).ok()?;
            PRIMARY_NAMES.get(primary.checked_sub(1)?).copied()
        })
}

/// As better-sqlite3 gives it: the result code's name as `code`, SQLite's message.
pub fn cause(db: &dyn DatabaseError) -> Cause {
    let code = db.code().and_then(|c| c.parse::<i64>().ok());
    Cause::new(code.and_then(code_name), db.message())
}

/// SQLite's message with its result code.
pub fn describe(db: &dyn DatabaseError) -> String {
    match db.code() {
        Some(code) => format!("{} (code {code})", db.message()),
        None => db.message().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_result_codes_as_better_sqlite3_does() {
        assert_eq!(code_name(1), Some("SQLITE_ERROR"));
        assert_eq!(code_name(5), Some("SQLITE_BUSY"));
        assert_eq!(code_name(517), Some("SQLITE_BUSY_SNAPSHOT"));
        assert_eq!(code_name(2067), Some("SQLITE_CONSTRAINT_UNIQUE"));
        assert_eq!(code_name(14), Some("SQLITE_CANTOPEN"));
        assert_eq!(code_name(28), Some("SQLITE_WARNING"));
        // An extended code without a name of its own: its primary code's.
        assert_eq!(code_name(10 | (13 << 8)), Some("SQLITE_IOERR"));
        assert_eq!(code_name(0), None);
    }
}
