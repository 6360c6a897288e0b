//! Where a `sqlite:` DSN points: a file (resolved against the working directory once, at
//! construction) or the process's own in-memory database.

use crate::support::error::{Error, Result};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqliteLocation {
    File(PathBuf),
    /// `sqlite://:memory:`: private to this process, shared by its transports on that DSN.
    Memory,
}

impl SqliteLocation {
    /// What identifies the database within the process.
    pub fn key(&self) -> String {
        match self {
            SqliteLocation::File(path) => path.display().to_string(),
            SqliteLocation::Memory => ":memory:".to_owned(),
        }
    }
}

/// `sqlite://relative/path.db`, `sqlite:///absolute/path.db`, `sqlite:relative.db`,
/// `sqlite://:memory:`. A query string is not accepted (there is nothing to configure).
pub fn parse_sqlite_location(dsn: &str) -> Result<SqliteLocation> {
    let rest = dsn.split_once(':').map(|(_, rest)| rest).unwrap_or("");
    let path = rest.strip_prefix("//").unwrap_or(rest);
    // Shown redacted: a DSN written as a URL may carry a password (SQLite has no use for one).
    let shown = crate::support::dsn::redact_dsn(dsn);
    if path.contains('?') || path.contains('#') {
        return Err(Error::connection(format!(
            "Invalid SQLite DSN \"{shown}\": query strings and fragments are not supported; use sqlite://path/to/file.db."
        )));
    }
    if path.is_empty() {
        return Err(Error::connection(format!(
            "Invalid SQLite DSN \"{shown}\": no file path; use sqlite://relative/file.db, sqlite:///absolute/file.db or sqlite://:memory:."
        )));
    }
    if path == ":memory:" {
        return Ok(SqliteLocation::Memory);
    }
    let path = PathBuf::from(path);
    let absolute = if path.is_absolute() {
        path
    } else {
        std::env::current_dir()
            .map_err(|e| {
                Error::connection(format!(
                    "Cannot resolve SQLite path \"{}\": {e}",
                    path.display()
                ))
            })?
            .join(path)
    };
    Ok(SqliteLocation::File(absolute))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dsn_forms() {
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(
            parse_sqlite_location("sqlite://queue.db").unwrap(),
            SqliteLocation::File(cwd.join("queue.db"))
        );
        assert_eq!(
            parse_sqlite_location("sqlite:queue.db").unwrap(),
            SqliteLocation::File(cwd.join("queue.db"))
        );
        assert_eq!(
            parse_sqlite_location("sqlite://data/q.db").unwrap(),
            SqliteLocation::File(cwd.join("data/q.db"))
        );
        assert_eq!(
            parse_sqlite_location("sqlite:///var/lib/app/q.db").unwrap(),
            SqliteLocation::File(PathBuf::from("/var/lib/app/q.db"))
        );
        assert_eq!(
            parse_sqlite_location("sqlite://:memory:").unwrap(),
            SqliteLocation::Memory
        );
        assert!(parse_sqlite_location("sqlite://").is_err());
        assert!(parse_sqlite_location("sqlite://q.db?mode=ro").is_err());
    }
}
