//! `doctor` for the SQL dialects: reachability, server version, clock, the shared table's
//! columns and claim index against what setup creates, and each dialect's own needs
//! (PostgreSQL: SKIP LOCKED and a LISTEN/NOTIFY round trip; MySQL/MariaDB: SKIP LOCKED and
//! the isolation level the transport's connections run at; SQLite: the file and its journal
//! mode). Every statement is bounded; nothing is created or changed (the NOTIFY goes to a
//! channel of the doctor's own).

use super::checks::{judge_clock, judge_version, Report};
use super::connect::{
    bounded, host_now_ms, open_server, open_sqlite, sql_error, sqlite_file, SqlSession,
    STATEMENT_BOUND,
};
use super::schema::{judge_columns, judge_index, Column};
use crate::engines::sql::mysql::MySql;
use crate::engines::sql::postgres::Postgres;
use crate::support::dsn::{Dialect, SqlDsn};
use crate::support::error::Result;
use sqlx::postgres::PgListener;
use sqlx::{Executor, Row};
use std::time::{Duration, Instant};

/// How long the LISTEN/NOTIFY round trip may take.
const NOTIFY_BOUND: Duration = Duration::from_secs(2);

/// What the SQL doctor looks at.
pub struct SqlTarget<'a> {
    pub dsn: &'a SqlDsn,
    pub table: &'a str,
    pub connect_timeout: Duration,
}

/// Runs one bounded statement on a connection, its error in the dialect's words.
macro_rules! run {
    ($d:ty, $target:expr, $what:expr, $fut:expr) => {
        bounded(STATEMENT_BOUND, $what, $fut, |e| {
            sql_error::<$d>($what, e, &$target.dsn.secrets)
        })
    };
}

pub async fn doctor(report: &mut Report, target: &SqlTarget<'_>) {
    if let Err(err) = crate::support::ident::validate_table_name(target.table) {
        report.fail("table", err.message);
        return;
    }
    match target.dsn.dialect {
        Dialect::Postgres => postgres(report, target).await,
        Dialect::MySql => mysql(report, target).await,
        Dialect::Sqlite => sqlite(report, target).await,
    }
}

fn connected(report: &mut Report, target: &SqlTarget<'_>, ms: u128) {
    report.pass("connect", format!("{} in {ms} ms", target.dsn.redacted));
}

/// The verdict of one step: its failure becomes a FAIL line named `name`.
fn or_fail<T>(report: &mut Report, name: &str, result: Result<T>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(err) => {
            report.fail(name, err.message);
            None
        }
    }
}

fn table_missing(report: &mut Report, table: &str) {
    report.fail(
        "table",
        format!(
            "table {table} does not exist (the transport creates it on setup() or with autoSetup)"
        ),
    );
}

async fn postgres(report: &mut Report, target: &SqlTarget<'_>) {
    let opened = open_server::<Postgres>(target.dsn, target.connect_timeout).await;
    let Some(mut s) = or_fail(report, "connect", opened) else {
        return;
    };
    connected(report, target, s.connect_ms);
    postgres_checks(report, target, &mut s).await;
    s.close().await;
}

async fn postgres_checks(report: &mut Report, t: &SqlTarget<'_>, s: &mut SqlSession<Postgres>) {
    let version = run!(
        Postgres,
        t,
        "server version",
        s.conn.fetch_one("SHOW server_version")
    )
    .await
    .and_then(|row| {
        row.try_get::<String, _>(0)
            .map_err(|e| sql_error::<Postgres>("server version", e, &[]))
    });
    if let Some(version) = or_fail(report, "server version", version) {
        judge_version(
            report,
            "server version",
            "PostgreSQL",
            &version,
            (10, 0, 0),
            "identity columns",
        );
    }
    let sent = host_now_ms();
    let clock = run!(
        Postgres,
        t,
        "clock",
        s.conn
            .fetch_one("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms")
    )
    .await;
    if let Some(row) = or_fail(report, "clock", clock) {
        judge_clock(
            report,
            row.try_get("ms").unwrap_or(f64::NAN),
            sent,
            host_now_ms(),
        );
    }
    let exists = run!(
        Postgres,
        t,
        "table",
        sqlx::query("SELECT to_regclass($1) IS NOT NULL AS found")
            .bind(t.table)
            .fetch_one(&mut s.conn)
    )
    .await;
    let Some(found) = or_fail(report, "table", exists) else {
        return;
    };
    if !found.try_get::<bool, _>("found").unwrap_or(false) {
        table_missing(report, t.table);
    } else {
        report.pass("table", format!("{} exists", t.table));
        let columns = run!(
            Postgres,
            t,
            "columns",
            sqlx::query(
                "SELECT a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS ty, \
                        NOT a.attnotnull AS nullable, (a.attidentity <> '' OR a.atthasdef) AS generated \
                   FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 \
                    AND NOT a.attisdropped ORDER BY a.attnum",
            )
            .bind(t.table)
            .fetch_all(&mut s.conn)
        )
        .await;
        if let Some(rows) = or_fail(report, "columns", columns) {
            let found: Vec<Column> = rows
                .iter()
                .map(|r| Column {
                    name: r.try_get("name").unwrap_or_default(),
                    ty: r
                        .try_get::<String, _>("ty")
                        .unwrap_or_default()
                        .to_lowercase(),
                    nullable: r.try_get("nullable").unwrap_or(true),
                    generated: r.try_get("generated").unwrap_or(false),
                })
                .collect();
            judge_columns(report, Dialect::Postgres, t.table, &found);
        }
        let indexes = run!(
            Postgres,
            t,
            "claim index",
            sqlx::query(
                "SELECT c.relname::text AS index_name, a.attname::text AS column_name \
                   FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
                   CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
                   JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
                  WHERE i.indrelid = to_regclass($1) ORDER BY c.relname, k.ord",
            )
            .bind(t.table)
            .fetch_all(&mut s.conn)
        )
        .await;
        if let Some(rows) = or_fail(report, "claim index", indexes) {
            judge_index(report, t.table, &index_columns(&rows));
        }
    }
    let probe = if found.try_get::<bool, _>("found").unwrap_or(false) {
        format!(
            "SELECT id FROM {} WHERE false FOR UPDATE SKIP LOCKED",
            t.table
        )
    } else {
        "SELECT 1 FROM (VALUES (1)) AS v(x) FOR UPDATE SKIP LOCKED".to_owned()
    };
    let skip = run!(Postgres, t, "skip locked", s.conn.execute(probe.as_str())).await;
    if or_fail(report, "skip locked", skip).is_some() {
        report.pass("skip locked", "FOR UPDATE SKIP LOCKED accepted");
    }
    notify_round_trip(report, t, s).await;
}

/// LISTEN on a channel of the doctor's own on a second connection, NOTIFY it from the first,
/// and time the arrival.
async fn notify_round_trip(report: &mut Report, t: &SqlTarget<'_>, s: &mut SqlSession<Postgres>) {
    let channel = format!("nmn_doctor_{}", uuid::Uuid::new_v4().simple());
    let listening = bounded(
        t.connect_timeout + STATEMENT_BOUND,
        "listen/notify",
        async {
            let mut listener = PgListener::connect_with(&s.pool).await?;
            listener.listen(&channel).await?;
            Ok::<_, sqlx::Error>(listener)
        },
        |e| sql_error::<Postgres>("listen/notify", e, &t.dsn.secrets),
    )
    .await;
    let Some(mut listener) = or_fail(report, "listen/notify", listening) else {
        return;
    };
    let start = Instant::now();
    let sent = run!(
        Postgres,
        t,
        "listen/notify",
        sqlx::query("SELECT pg_notify($1, 'doctor')")
            .bind(&channel)
            .execute(&mut s.conn)
    )
    .await;
    if or_fail(report, "listen/notify", sent).is_some() {
        match tokio::time::timeout(NOTIFY_BOUND, listener.try_recv()).await {
            Ok(Ok(Some(n))) if n.channel() == channel => report.pass(
                "listen/notify",
                format!("round trip in {} ms", start.elapsed().as_millis()),
            ),
            Ok(Ok(_)) => report.fail("listen/notify", "the listening connection was closed"),
            Ok(Err(e)) => report.fail(
                "listen/notify",
                sql_error::<Postgres>("listen/notify", e, &t.dsn.secrets).message,
            ),
            Err(_) => report.fail(
                "listen/notify",
                format!(
                    "no notification within {} ms (a pooler in transaction mode drops LISTEN; set useNotify: false)",
                    NOTIFY_BOUND.as_millis()
                ),
            ),
        }
    }
    tokio::time::timeout(STATEMENT_BOUND, listener.unlisten_all())
        .await
        .ok();
}

/// `(index_name, column_name)` rows in index and column order → index → columns.
fn index_columns<R: Row>(rows: &[R]) -> Vec<(String, Vec<String>)>
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

async fn mysql(report: &mut Report, target: &SqlTarget<'_>) {
    let opened = open_server::<MySql>(target.dsn, target.connect_timeout).await;
    let Some(mut s) = or_fail(report, "connect", opened) else {
        return;
    };
    connected(report, target, s.connect_ms);
    mysql_checks(report, target, &mut s).await;
    s.close().await;
}

/// `bigint(20) unsigned` → `bigint unsigned` (MariaDB and MySQL 5 show integer display
/// widths, MySQL 8 does not).
fn mysql_type(ty: &str) -> String {
    let ty = ty.to_lowercase();
    for int in ["tinyint(", "smallint(", "mediumint(", "bigint(", "int("] {
        if let Some(rest) = ty.strip_prefix(int) {
            if let Some(close) = rest.find(')') {
                return format!("{}{}", &int[..int.len() - 1], &rest[close + 1..]);
            }
        }
    }
    ty
}

async fn mysql_checks(report: &mut Report, t: &SqlTarget<'_>, s: &mut SqlSession<MySql>) {
    let version = run!(
        MySql,
        t,
        "server version",
        s.conn.fetch_one("SELECT VERSION() AS v")
    )
    .await
    .and_then(|row| {
        row.try_get::<String, _>("v")
            .map_err(|e| sql_error::<MySql>("server version", e, &[]))
    });
    if let Some(version) = or_fail(report, "server version", version) {
        if version.to_ascii_lowercase().contains("mariadb") {
            judge_version(
                report,
                "server version",
                "MariaDB",
                &version,
                (10, 6, 0),
                "FOR UPDATE SKIP LOCKED",
            );
        } else {
            judge_version(
                report,
                "server version",
                "MySQL",
                &version,
                (8, 0, 1),
                "FOR UPDATE SKIP LOCKED",
            );
        }
    }
    let sent = host_now_ms();
    let clock = run!(
        MySql,
        t,
        "clock",
        s.conn
            .fetch_one("SELECT UNIX_TIMESTAMP(NOW(3)) * 1e3 AS ms")
    )
    .await;
    if let Some(row) = or_fail(report, "clock", clock) {
        judge_clock(
            report,
            row.try_get("ms").unwrap_or(f64::NAN),
            sent,
            host_now_ms(),
        );
    }
    let columns = run!(
        MySql,
        t,
        "columns",
        sqlx::query(
            "SELECT CAST(column_name AS CHAR) AS name, CAST(column_type AS CHAR) AS ty, \
                    CAST(is_nullable AS CHAR) AS nullable, CAST(extra AS CHAR) AS extra \
               FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? \
              ORDER BY ordinal_position",
        )
        .bind(t.table)
        .fetch_all(&mut s.conn)
    )
    .await;
    let Some(rows) = or_fail(report, "table", columns) else {
        return;
    };
    let exists = !rows.is_empty();
    if !exists {
        table_missing(report, t.table);
    } else {
        report.pass("table", format!("{} exists", t.table));
        let found: Vec<Column> = rows
            .iter()
            .map(|r| Column {
                name: r
                    .try_get::<String, _>("name")
                    .unwrap_or_default()
                    .to_lowercase(),
                ty: mysql_type(&r.try_get::<String, _>("ty").unwrap_or_default()),
                nullable: r.try_get::<String, _>("nullable").unwrap_or_default() == "YES",
                generated: r
                    .try_get::<String, _>("extra")
                    .unwrap_or_default()
                    .to_lowercase()
                    .contains("auto_increment"),
            })
            .collect();
        judge_columns(report, Dialect::MySql, t.table, &found);
        let indexes = run!(
            MySql,
            t,
            "claim index",
            sqlx::query(
                "SELECT CAST(index_name AS CHAR) AS index_name, CAST(column_name AS CHAR) AS column_name \
                   FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? \
                  ORDER BY index_name, seq_in_index",
            )
            .bind(t.table)
            .fetch_all(&mut s.conn)
        )
        .await;
        if let Some(rows) = or_fail(report, "claim index", indexes) {
            judge_index(report, t.table, &index_columns(&rows));
        }
        let probe = format!(
            "SELECT id FROM {} WHERE 1 = 0 FOR UPDATE SKIP LOCKED",
            t.table
        );
        let skip = run!(MySql, t, "skip locked", s.conn.execute(probe.as_str())).await;
        if or_fail(report, "skip locked", skip).is_some() {
            report.pass("skip locked", "FOR UPDATE SKIP LOCKED accepted");
        }
    }
    isolation(report, t, s).await;
}

/// The isolation level a connection of the transport's pool runs at (its pool sets it on
/// every new connection), beside the server's default.
async fn isolation(report: &mut Report, t: &SqlTarget<'_>, s: &mut SqlSession<MySql>) {
    let acquired = bounded(
        t.connect_timeout + STATEMENT_BOUND,
        "isolation",
        s.pool.acquire(),
        |e| sql_error::<MySql>("isolation", e, &t.dsn.secrets),
    )
    .await;
    let Some(mut conn) = or_fail(report, "isolation", acquired) else {
        return;
    };
    // MySQL 8 names it transaction_isolation; MariaDB before 11.1 only tx_isolation.
    let mut levels = None;
    for variable in ["transaction_isolation", "tx_isolation"] {
        let sql = format!(
            "SELECT CAST(@@SESSION.{variable} AS CHAR) AS session_level, CAST(@@GLOBAL.{variable} AS CHAR) AS global_level"
        );
        let read = run!(MySql, t, "isolation", conn.fetch_one(sql.as_str())).await;
        if let Ok(row) = read {
            levels = Some((
                row.try_get::<String, _>("session_level")
                    .unwrap_or_default(),
                row.try_get::<String, _>("global_level").unwrap_or_default(),
            ));
            break;
        }
    }
    match levels {
        Some((session, global)) if session.eq_ignore_ascii_case("READ-COMMITTED") => report.pass(
            "isolation",
            format!("transport sessions run at {session} (server default {global})"),
        ),
        Some((session, _)) => report.fail(
            "isolation",
            format!("transport sessions run at {session}, expected READ-COMMITTED (claims would lock rows they pass)"),
        ),
        None => report.fail("isolation", "the session isolation level could not be read"),
    }
}

async fn sqlite(report: &mut Report, target: &SqlTarget<'_>) {
    let path = match sqlite_file(target.dsn) {
        Ok(path) => path,
        Err(err) => {
            report.fail("file", err.message);
            return;
        }
    };
    let Some((mut conn, ms)) = or_fail(
        report,
        "file",
        open_sqlite(&path, target.connect_timeout).await,
    ) else {
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
            table_missing(report, target.table);
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
    tokio::time::timeout(STATEMENT_BOUND, sqlx::Connection::close(conn))
        .await
        .ok();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_integer_display_widths_are_dropped() {
        assert_eq!(mysql_type("bigint(20) unsigned"), "bigint unsigned");
        assert_eq!(mysql_type("BIGINT UNSIGNED"), "bigint unsigned");
        assert_eq!(mysql_type("int(11)"), "int");
        assert_eq!(mysql_type("varchar(190)"), "varchar(190)");
        assert_eq!(mysql_type("datetime(3)"), "datetime(3)");
    }
}
