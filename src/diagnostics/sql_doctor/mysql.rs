//! `doctor` on MySQL/MariaDB: SKIP LOCKED, the shared table and its index, and the isolation
//! level the transport's connections run at.

use super::steps::{
    check_clock, check_index, check_skip_locked, check_version, connect, or_fail, table_missing,
    SqlTarget,
};
use crate::diagnostics::checks::Report;
use crate::diagnostics::connect::{bounded, sql_error, SqlSession, CHECK_STATEMENT_BOUND};
use crate::diagnostics::schema::{judge_columns, Column};
use crate::engines::sql::mysql::MySql;
use crate::support::dsn::Dialect;
use sqlx::{Executor, Row};

pub(super) async fn doctor(report: &mut Report, target: &SqlTarget<'_>) {
    let Some(mut s) = connect::<MySql>(report, target).await else {
        return;
    };
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
    let read = s.conn.fetch_one("SELECT VERSION() AS v");
    let version = run!(MySql, t, "server version", read);
    check_version::<MySql, _, _>(report, version, "v", |version| {
        if version.to_ascii_lowercase().contains("mariadb") {
            ("MariaDB", (10, 6, 0), "FOR UPDATE SKIP LOCKED")
        } else {
            ("MySQL", (8, 0, 4), "FOR UPDATE SKIP LOCKED and JSON_TABLE")
        }
    })
    .await;
    let now = s
        .conn
        .fetch_one("SELECT UNIX_TIMESTAMP(NOW(3)) * 1e3 AS ms");
    check_clock(report, run!(MySql, t, "clock", now)).await;
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
        table_missing(report, t);
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
        let indexes = sqlx::query(
            "SELECT CAST(index_name AS CHAR) AS index_name, CAST(column_name AS CHAR) AS column_name \
               FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? \
              ORDER BY index_name, seq_in_index",
        )
        .bind(t.table);
        let indexes = indexes.fetch_all(&mut s.conn);
        check_index(report, t, run!(MySql, t, "claim index", indexes)).await;
        let probe = format!(
            "SELECT id FROM {} WHERE 1 = 0 FOR UPDATE SKIP LOCKED",
            t.table
        );
        let skip = s.conn.execute(probe.as_str());
        check_skip_locked(report, run!(MySql, t, "skip locked", skip)).await;
    }
    isolation(report, t, s).await;
}

/// The isolation level a connection of the transport's pool runs at (its pool sets it on
/// every new connection), beside the server's default.
async fn isolation(report: &mut Report, t: &SqlTarget<'_>, s: &mut SqlSession<MySql>) {
    let acquired = bounded(
        t.connect_timeout + CHECK_STATEMENT_BOUND,
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
