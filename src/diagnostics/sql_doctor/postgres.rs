//! `doctor` on PostgreSQL: SKIP LOCKED, the shared table and its index, and a LISTEN/NOTIFY
//! round trip on a channel of the doctor's own.

use super::steps::{
    check_clock, check_index, check_skip_locked, check_version, connect, or_fail, table_missing,
    SqlTarget,
};
use crate::diagnostics::checks::Report;
use crate::diagnostics::connect::{bounded, sql_error, SqlSession, CHECK_STATEMENT_BOUND};
use crate::diagnostics::schema::{judge_columns, Column};
use crate::engines::sql::postgres::Postgres;
use crate::support::dsn::Dialect;
use sqlx::postgres::PgListener;
use sqlx::{Executor, Row};
use std::time::{Duration, Instant};

/// The oldest release the statements run on, and what they need from it.
const OLDEST: (&str, (u32, u32, u32), &str) = ("PostgreSQL", (10, 0, 0), "identity columns");

/// The server's now in epoch milliseconds.
const NOW_MS: &str = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS ms";

/// How long the LISTEN/NOTIFY round trip may take.
const NOTIFY_BOUND: Duration = Duration::from_secs(2);

pub(super) async fn doctor(report: &mut Report, target: &SqlTarget<'_>) {
    let Some(mut s) = connect::<Postgres>(report, target).await else {
        return;
    };
    postgres_checks(report, target, &mut s).await;
    s.close().await;
}

async fn postgres_checks(report: &mut Report, t: &SqlTarget<'_>, s: &mut SqlSession<Postgres>) {
    let read = s.conn.fetch_one("SHOW server_version");
    let version = run!(Postgres, t, "server version", read);
    check_version::<Postgres, _, _>(report, version, 0, |_| OLDEST).await;
    let now = s.conn.fetch_one(NOW_MS);
    check_clock(report, run!(Postgres, t, "clock", now)).await;
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
        table_missing(report, t);
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
        let indexes = sqlx::query(
            "SELECT c.relname::text AS index_name, a.attname::text AS column_name \
               FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
               CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
               JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum \
              WHERE i.indrelid = to_regclass($1) ORDER BY c.relname, k.ord",
        )
        .bind(t.table);
        let indexes = indexes.fetch_all(&mut s.conn);
        check_index(report, t, run!(Postgres, t, "claim index", indexes)).await;
    }
    let probe = if found.try_get::<bool, _>("found").unwrap_or(false) {
        format!(
            "SELECT id FROM {} WHERE false FOR UPDATE SKIP LOCKED",
            t.table
        )
    } else {
        "SELECT 1 FROM (VALUES (1)) AS v(x) FOR UPDATE SKIP LOCKED".to_owned()
    };
    let skip = s.conn.execute(probe.as_str());
    check_skip_locked(report, run!(Postgres, t, "skip locked", skip)).await;
    notify_round_trip(report, t, s).await;
}

/// LISTEN on a channel of the doctor's own on a second connection, NOTIFY it from the first,
/// and time the arrival.
async fn notify_round_trip(report: &mut Report, t: &SqlTarget<'_>, s: &mut SqlSession<Postgres>) {
    let channel = format!("nmn_doctor_{}", uuid::Uuid::new_v4().simple());
    let listening = bounded(
        t.connect_timeout + CHECK_STATEMENT_BOUND,
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
    tokio::time::timeout(CHECK_STATEMENT_BOUND, listener.unlisten_all())
        .await
        .ok();
}
