//! What every dialect's doctor does alike: the target it looks at, the connection to a server,
//! a step's failure as a FAIL line, the server's version and clock, the missing-table line,
//! the claim index, and the SKIP LOCKED probe. A step is handed its statement's future, not
//! yet started, so that each dialect writes its own SQL on its own connection.

use crate::diagnostics::checks::{judge_clock, judge_version, Report};
use crate::diagnostics::connect::{host_now_ms, open_server, sql_error, SqlSession};
use crate::diagnostics::schema::judge_index;
use crate::engines::sql::SqlDialect;
use crate::support::dsn::SqlDsn;
use crate::support::error::Result;
use sqlx::{ColumnIndex, Decode, Row, Type};
use std::future::Future;
use std::time::Duration;

/// What the SQL doctor looks at.
pub struct SqlTarget<'a> {
    pub dsn: &'a SqlDsn,
    pub table: &'a str,
    pub connect_timeout: Duration,
    /// The transports create the table on first use (`autoSetup`).
    pub auto_setup: bool,
}

/// Connects to a server dialect as its transport does: the connect line, or its FAIL line and
/// `None`.
pub(super) async fn connect<D: SqlDialect>(
    report: &mut Report,
    target: &SqlTarget<'_>,
) -> Option<SqlSession<D>> {
    let opened = open_server::<D>(target.dsn, target.connect_timeout).await;
    let session = or_fail(report, "connect", opened)?;
    let ms = session.connect_ms;
    report.pass("connect", format!("{} in {ms} ms", target.dsn.redacted));
    Some(session)
}

/// The server's version (column `column` of the row `read` gives) against the oldest release
/// `minimum` names for it: `(product, release, what needs it)`.
pub(super) async fn check_version<D: SqlDialect, R: Row, I: ColumnIndex<R>>(
    report: &mut Report,
    read: impl Future<Output = Result<R>>,
    column: I,
    minimum: impl FnOnce(&str) -> (&'static str, (u32, u32, u32), &'static str),
) where
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    let version = read.await.and_then(|row| {
        row.try_get::<String, _>(column)
            .map_err(|e| sql_error::<D>("server version", e, &[]))
    });
    if let Some(version) = or_fail(report, "server version", version) {
        let (product, release, needed_for) = minimum(&version);
        judge_version(
            report,
            "server version",
            product,
            &version,
            release,
            needed_for,
        );
    }
}

/// The server's clock against this host's: `read` gives the server's now in epoch
/// milliseconds, as column `ms`.
pub(super) async fn check_clock<R: Row>(report: &mut Report, read: impl Future<Output = Result<R>>)
where
    for<'r> f64: Decode<'r, R::Database> + Type<R::Database>,
    &'static str: ColumnIndex<R>,
{
    let sent = host_now_ms();
    if let Some(row) = or_fail(report, "clock", read.await) {
        judge_clock(
            report,
            row.try_get("ms").unwrap_or(f64::NAN),
            sent,
            host_now_ms(),
        );
    }
}

/// The claim index against what setup creates: `read` gives `(index_name, column_name)` rows.
pub(super) async fn check_index<R: Row>(
    report: &mut Report,
    target: &SqlTarget<'_>,
    read: impl Future<Output = Result<Vec<R>>>,
) where
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    &'static str: ColumnIndex<R>,
{
    if let Some(rows) = or_fail(report, "claim index", read.await) {
        judge_index(report, target.table, &index_columns(&rows));
    }
}

/// `probe` runs a statement with `FOR UPDATE SKIP LOCKED`.
pub(super) async fn check_skip_locked<T>(
    report: &mut Report,
    probe: impl Future<Output = Result<T>>,
) {
    if or_fail(report, "skip locked", probe.await).is_some() {
        report.pass("skip locked", "FOR UPDATE SKIP LOCKED accepted");
    }
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
fn index_columns<R: Row>(rows: &[R]) -> Vec<(String, Vec<String>)>
where
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    &'static str: ColumnIndex<R>,
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
