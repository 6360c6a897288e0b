//! What every dialect's doctor does alike: the target it looks at, the connect line, a
//! step's failure as a FAIL line, the missing-table line, and index rows grouped by index.

use crate::diagnostics::checks::Report;
use crate::support::dsn::SqlDsn;
use crate::support::error::Result;
use sqlx::Row;
use std::time::Duration;

/// What the SQL doctor looks at.
pub struct SqlTarget<'a> {
    pub dsn: &'a SqlDsn,
    pub table: &'a str,
    pub connect_timeout: Duration,
    /// The transports create the table on first use (`autoSetup`).
    pub auto_setup: bool,
}

pub(super) fn connected(report: &mut Report, target: &SqlTarget<'_>, ms: u128) {
    report.pass("connect", format!("{} in {ms} ms", target.dsn.redacted));
}

/// The verdict of one step: its failure becomes a FAIL line named `name`.
pub(super) fn or_fail<T>(report: &mut Report, name: &str, result: Result<T>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(err) => {
            report.fail(name, err.message);
            None
        }
    }
}

/// A missing table is what a fresh database has: a warning while the transports create it on
/// first use (`autoSetup`, the default), a failure when they do not.
pub(super) fn table_missing(report: &mut Report, target: &SqlTarget<'_>) {
    let table = target.table;
    if target.auto_setup {
        report.warn(
            "table",
            format!(
                "table {table} does not exist yet: a transport creates it on first use (autoSetup)"
            ),
        );
    } else {
        report.fail(
            "table",
            format!("table {table} does not exist, and autoSetup is off: create it (docs/schema.md) or run setup()"),
        );
    }
}

/// `(index_name, column_name)` rows in index and column order → index → columns.
pub(super) fn index_columns<R: Row>(rows: &[R]) -> Vec<(String, Vec<String>)>
where
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    &'static str: sqlx::ColumnIndex<R>,
{
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for row in rows {
        let name: String = row.try_get("index_name").unwrap_or_default();
        let column: String = row.try_get("column_name").unwrap_or_default();
        match out.last_mut() {
            Some((last, cols)) if *last == name => cols.push(column.to_lowercase()),
            _ => out.push((name, vec![column.to_lowercase()])),
        }
    }
    out
}
