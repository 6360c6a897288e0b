//! `doctor` on SQLite: the file, its journal mode, and the shared table and its index.

use super::steps::{index_columns, or_fail, table_missing, SqlTarget};
use crate::diagnostics::checks::{judge_version, Report};
use crate::diagnostics::connect::{
    bounded, open_sqlite, sql_error, sqlite_file, CHECK_STATEMENT_BOUND,
};
use crate::diagnostics::schema::{judge_columns, judge_index, Column};
use crate::support::dsn::Dialect;
use crate::support::error::ErrorKind;
use sqlx::{Executor, Row};

pub(super) async fn doctor(report: &mut Report, target: &SqlTarget<'_>) {
    let path = match sqlite_file(target.dsn) {
        Ok(path) => path,
        Err(err) => {
            report.fail("file", err.message);
            return;
        }
    };
    let opened = open_sqlite(&path, target.connect_timeout).await;
    // A fresh database is a file not made yet: the transports make it on first use.
    if let Err(err) = &opened {
        if err.kind == ErrorKind::NotFound && target.auto_setup {
            report.warn(
                "file",
                format!(
                    "{} does not exist yet: a transport creates it on first use",
                    path.display()
                ),
            );
            return;
        }
    }
    let Some((mut conn, ms)) = or_fail(report, "file", opened) else {
        return;
    };
    report.pass("file", format!("{} opened in {ms} ms", path.display()));
    use crate::engines::sql::sqlite::Sqlite;
    let version = run!(
        Sqlite,
        target,
        "version",
        conn.fetch_one("SELECT sqlite_version() AS v")
    )
    .await;
    if let Some(row) = or_fail(report, "sqlite version", version) {
        let v: String = row.try_get("v").unwrap_or_default();
        judge_version(
            report,
            "sqlite version",
            "SQLite",
            &v,
            (3, 35, 0),
            "UPDATE … RETURNING",
        );
    }
    let mode = run!(
        Sqlite,
        target,
        "journal mode",
        conn.fetch_one("PRAGMA journal_mode")
    )
    .await;
    if let Some(row) = or_fail(report, "journal mode", mode) {
        let mode: String = row.try_get(0).unwrap_or_default();
        if mode.eq_ignore_ascii_case("wal") {
            report.pass("journal mode", "wal (readers and a writer side by side)");
        } else {
            report.warn(
                "journal mode",
                format!("{mode}: the transport switches the file to wal when it opens it"),
            );
        }
    }
    let columns = run!(
        Sqlite,
        target,
        "columns",
        sqlx::query(
            "SELECT name, lower(type) AS ty, \"notnull\" AS nn, pk FROM pragma_table_info(?1)"
        )
        .bind(target.table)
        .fetch_all(&mut conn)
    )
    .await;
    if let Some(rows) = or_fail(report, "table", columns) {
        if rows.is_empty() {
            table_missing(report, target);
        } else {
            report.pass("table", format!("{} exists", target.table));
            let found: Vec<Column> = rows
                .iter()
                .map(|r| {
                    let ty: String = r.try_get("ty").unwrap_or_default();
                    let pk = r.try_get::<i64, _>("pk").unwrap_or(0) == 1;
                    Column {
                        name: r
                            .try_get::<String, _>("name")
                            .unwrap_or_default()
                            .to_lowercase(),
                        generated: pk && ty == "integer",
                        nullable: r.try_get::<i64, _>("nn").unwrap_or(0) == 0 && !pk,
                        ty,
                    }
                })
                .collect();
            judge_columns(report, Dialect::Sqlite, target.table, &found);
            let indexes = run!(
                Sqlite,
                target,
                "claim index",
                sqlx::query(
                    "SELECT il.name AS index_name, ii.name AS column_name \
                       FROM pragma_index_list(?1) AS il, pragma_index_info(il.name) AS ii \
                      ORDER BY il.name, ii.seqno",
                )
                .bind(target.table)
                .fetch_all(&mut conn)
            )
            .await;
            if let Some(rows) = or_fail(report, "claim index", indexes) {
                judge_index(report, target.table, &index_columns(&rows));
            }
        }
    }
    tokio::time::timeout(CHECK_STATEMENT_BOUND, sqlx::Connection::close(conn))
        .await
        .ok();
}
