//! `doctor` on SQLite: the file, its journal mode, and the shared table and its index.

use super::steps::{check_index, or_fail, table_missing, SqlTarget};
use crate::diagnostics::checks::{judge_version, Report};
use crate::diagnostics::connect::{close_sqlite, open_sqlite, sqlite_file};
use crate::diagnostics::schema::{judge_columns, Column};
use crate::engines::sql::sqlite::Sqlite;
use crate::support::dsn::Dialect;
use crate::support::error::ErrorKind;
use sqlx::sqlite::SqliteConnection;
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
    let step = ("sqlite version", "version");
    let version = read_text(
        report,
        target,
        &mut conn,
        step,
        "SELECT sqlite_version() AS v",
    )
    .await;
    if let Some(v) = version {
        judge_version(
            report,
            "sqlite version",
            "SQLite",
            &v,
            (3, 35, 0),
            "UPDATE … RETURNING",
        );
    }
    let step = ("journal mode", "journal mode");
    let mode = read_text(report, target, &mut conn, step, "PRAGMA journal_mode").await;
    if let Some(mode) = mode {
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
            let indexes = sqlx::query(
                "SELECT il.name AS index_name, ii.name AS column_name \
                   FROM pragma_index_list(?1) AS il, pragma_index_info(il.name) AS ii \
                  ORDER BY il.name, ii.seqno",
            )
            .bind(target.table);
            let indexes = indexes.fetch_all(&mut conn);
            check_index(report, target, run!(Sqlite, target, "claim index", indexes)).await;
        }
    }
    close_sqlite(conn).await;
}

/// The text in the first column of the row `sql` gives (empty when it is not text); on a
/// failure, `None` after the FAIL line of step `name`, whose message says `what` failed.
async fn read_text(
    report: &mut Report,
    target: &SqlTarget<'_>,
    conn: &mut SqliteConnection,
    (name, what): (&str, &str),
    sql: &str,
) -> Option<String> {
    let row = run!(Sqlite, target, what, conn.fetch_one(sql)).await;
    let row = or_fail(report, name, row)?;
    Some(row.try_get(0).unwrap_or_default())
}
