//! `stats`: per queue (SQL, grouped by `queue_name`) or per stream and group (Redis): ready,
//! delayed, in flight, the age of the oldest ready message, and what successive samples need
//! for rates (messages added since the previous sample's cursor, and the backlog they land
//! in). Read-only: SELECTs on SQL (a SQLite file opened `query_only`), read commands on Redis;
//! nothing is created, changed or claimed.

use super::connect::{
    checked, close_sqlite, open_redis, open_server, open_sqlite, redis_query, sqlite_file,
};
use super::redis_values::{as_int, as_text, field, groups, id_ms, pairs, texts};
use crate::engines::sql::mysql::MySql;
use crate::engines::sql::postgres::Postgres;
use crate::engines::sql::sqlite::Sqlite;
use crate::support::dsn::{Dialect, RedisDsn, SqlDsn};
use crate::support::error::{Error, ErrorKind, Result};
use sqlx::{ColumnIndex, Decode, Row, Type};
use std::future::Future;
use std::time::Duration;

/// One queue's (or one stream group's) numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueStats {
    /// The queue name, or `<stream>/<group>`.
    pub name: String,
    /// Due and unclaimed (Redis: undelivered entries plus due delayed members).
    pub ready: i64,
    /// Not yet due.
    pub delayed: i64,
    /// Claimed and not settled (SQL: `delivered_at` set, lease run out or not; Redis: pending).
    pub in_flight: i64,
    pub oldest_ready_age_ms: Option<f64>,
    /// Messages added since the cursor given (`None` without one).
    pub added: Option<i64>,
    /// What additions land in (SQL: every row; Redis: the group's entries, undelivered or
    /// pending): `added - Δbacklog` between two samples is what was removed.
    pub backlog: i64,
}

/// One sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// Pass it to the next sample to get `added`.
    pub cursor: Option<String>,
    pub queues: Vec<QueueStats>,
}

/// What to sample.
pub struct SqlStatsTarget<'a> {
    pub dsn: &'a SqlDsn,
    pub table: &'a str,
    pub queue: Option<&'a str>,
    pub cursor: Option<&'a str>,
    pub connect_timeout: Duration,
}

pub struct StreamStatsTarget<'a> {
    pub dsn: &'a RedisDsn,
    pub cluster: bool,
    pub stream: &'a str,
    pub group: Option<&'a str>,
    pub delay_key: String,
    pub cursor: Option<&'a str>,
    pub connect_timeout: Duration,
}

fn cursor_value(cursor: Option<&str>) -> Result<Option<i64>> {
    cursor
        .map(|c| {
            c.parse::<i64>()
                .map_err(|_| Error::invalid_argument(format!("Invalid stats cursor {c:?}.")))
        })
        .transpose()
}

fn not_found(what: String) -> Error {
    Error::new(ErrorKind::NotFound, what)
}

/// A `(queue_name, ready, delayed, in_flight, oldest_ms, added, max_id)` row.
fn queue_row<R: Row>(row: &R, counted: bool) -> std::result::Result<(QueueStats, i64), sqlx::Error>
where
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> f64: Decode<'r, R::Database> + Type<R::Database>,
    &'static str: ColumnIndex<R>,
{
    let ready: i64 = row.try_get("ready")?;
    let delayed: i64 = row.try_get("delayed")?;
    let in_flight: i64 = row.try_get("in_flight")?;
    let stats = QueueStats {
        name: row.try_get("queue_name")?,
        ready,
        delayed,
        in_flight,
        oldest_ready_age_ms: row
            .try_get::<Option<f64>, _>("oldest_ms")?
            .map(|ms| ms.max(0.0)),
        added: if counted {
            Some(row.try_get("added")?)
        } else {
            None
        },
        backlog: ready + delayed + in_flight,
    };
    Ok((stats, row.try_get::<Option<i64>, _>("max_id")?.unwrap_or(0)))
}

/// The queues' rows `sample` reads (started only when the table was `found`), or `None`.
async fn sampled<R: Row>(
    found: bool,
    sample: impl Future<Output = std::result::Result<Vec<R>, sqlx::Error>>,
    counted: bool,
) -> std::result::Result<Option<Vec<(QueueStats, i64)>>, sqlx::Error>
where
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> f64: Decode<'r, R::Database> + Type<R::Database>,
    &'static str: ColumnIndex<R>,
{
    if !found {
        return Ok(None);
    }
    let rows = sample.await?;
    rows.iter()
        .map(|r| queue_row(r, counted))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Some)
}

const PG_STATS: &str = "SELECT queue_name::text AS queue_name, \
    count(*) FILTER (WHERE delivered_at IS NULL AND available_at <= now()) AS ready, \
    count(*) FILTER (WHERE delivered_at IS NULL AND available_at > now()) AS delayed, \
    count(*) FILTER (WHERE delivered_at IS NOT NULL) AS in_flight, \
    (extract(epoch FROM now() - min(available_at) FILTER (WHERE delivered_at IS NULL AND available_at <= now())) * 1000)::float8 AS oldest_ms, \
    count(*) FILTER (WHERE id > $1) AS added, max(id) AS max_id \
    FROM {t} WHERE ($2::text IS NULL OR queue_name = $2) GROUP BY queue_name ORDER BY queue_name";

const MYSQL_STATS: &str = "SELECT CAST(queue_name AS CHAR) AS queue_name, \
    CAST(COALESCE(SUM(delivered_at IS NULL AND available_at <= NOW(3)), 0) AS SIGNED) AS ready, \
    CAST(COALESCE(SUM(delivered_at IS NULL AND available_at > NOW(3)), 0) AS SIGNED) AS `delayed`, \
    CAST(COALESCE(SUM(delivered_at IS NOT NULL), 0) AS SIGNED) AS in_flight, \
    TIMESTAMPDIFF(MICROSECOND, MIN(CASE WHEN delivered_at IS NULL AND available_at <= NOW(3) THEN available_at END), NOW(3)) / 1000e0 AS oldest_ms, \
    CAST(COALESCE(SUM(id > ?), 0) AS SIGNED) AS added, CAST(MAX(id) AS SIGNED) AS max_id \
    FROM {t} WHERE (? IS NULL OR queue_name = ?) GROUP BY queue_name ORDER BY queue_name";

const SQLITE_STATS: &str = "SELECT queue_name, \
    COALESCE(SUM(delivered_at IS NULL AND available_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')), 0) AS ready, \
    COALESCE(SUM(delivered_at IS NULL AND available_at > strftime('%Y-%m-%d %H:%M:%f', 'now')), 0) AS delayed, \
    COALESCE(SUM(delivered_at IS NOT NULL), 0) AS in_flight, \
    (julianday('now') - julianday(MIN(CASE WHEN delivered_at IS NULL AND available_at <= strftime('%Y-%m-%d %H:%M:%f', 'now') THEN available_at END))) * 86400000.0 AS oldest_ms, \
    COALESCE(SUM(id > ?1), 0) AS added, MAX(id) AS max_id \
    FROM {t} WHERE (?2 IS NULL OR queue_name = ?2) GROUP BY queue_name ORDER BY queue_name";

/// Samples a SQL table's queues.
pub async fn sql_stats(t: &SqlStatsTarget<'_>) -> Result<Stats> {
    crate::support::ident::validate_table_name(t.table)?;
    let after = cursor_value(t.cursor)?;
    let counted = after.is_some();
    let after = after.unwrap_or(i64::MAX);
    let missing = || not_found(format!("table {} does not exist", t.table));
    let rows = match t.dsn.dialect {
        Dialect::Postgres => {
            let mut s = open_server::<Postgres>(t.dsn, t.connect_timeout).await?;
            let sql = PG_STATS.replace("{t}", t.table);
            let result = async {
                let found = sqlx::query("SELECT to_regclass($1) IS NOT NULL AS found")
                    .bind(t.table)
                    .fetch_one(&mut s.conn)
                    .await?
                    .try_get::<bool, _>("found")?;
                let sample = sqlx::query(&sql).bind(after).bind(t.queue);
                sampled(found, sample.fetch_all(&mut s.conn), counted).await
            };
            let rows = checked::<Postgres, _>(t.dsn, "stats", result).await;
            s.close().await;
            rows
        }
        Dialect::MySql => {
            let mut s = open_server::<MySql>(t.dsn, t.connect_timeout).await?;
            let sql = MYSQL_STATS.replace("{t}", t.table);
            let result = async {
                let tables: i64 = sqlx::query(
                    "SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
                )
                .bind(t.table)
                .fetch_one(&mut s.conn)
                .await?
                .try_get("n")?;
                let sample = sqlx::query(&sql).bind(after).bind(t.queue).bind(t.queue);
                sampled(tables > 0, sample.fetch_all(&mut s.conn), counted).await
            };
            let rows = checked::<MySql, _>(t.dsn, "stats", result).await;
            s.close().await;
            rows
        }
        Dialect::Sqlite => {
            let path = sqlite_file(t.dsn)?;
            let (mut conn, _) = open_sqlite(&path, t.connect_timeout).await?;
            let sql = SQLITE_STATS.replace("{t}", t.table);
            let result = async {
                let tables: i64 = sqlx::query(
                    "SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = ?1",
                )
                .bind(t.table)
                .fetch_one(&mut conn)
                .await?
                .try_get("n")?;
                let sample = sqlx::query(&sql).bind(after).bind(t.queue);
                sampled(tables > 0, sample.fetch_all(&mut conn), counted).await
            };
            let rows = checked::<Sqlite, _>(t.dsn, "stats", result).await;
            close_sqlite(conn).await;
            rows
        }
    }?
    .ok_or_else(missing)?;
    let top = rows.iter().map(|(_, max)| *max).max().unwrap_or(0);
    let cursor = if counted { top.max(after) } else { top };
    Ok(Stats {
        cursor: Some(cursor.to_string()),
        queues: rows.into_iter().map(|(q, _)| q).collect(),
    })
}

/// Samples a stream's groups.
pub async fn stream_stats(t: &StreamStatsTarget<'_>) -> Result<Stats> {
    let after = cursor_value(t.cursor)?;
    let secrets = &t.dsn.secrets;
    let (mut conn, _) = open_redis(t.dsn, t.cluster, t.connect_timeout).await?;
    let conn = &mut conn;
    let mut cmd = redis::cmd("TYPE");
    cmd.arg(t.stream);
    let kind = as_text(&redis_query(conn, &cmd, "stats", secrets).await?).unwrap_or_default();
    if kind != "stream" {
        return Err(not_found(format!("stream {} does not exist", t.stream)));
    }
    let mut cmd = redis::cmd("XINFO");
    cmd.arg("STREAM").arg(t.stream);
    let info = pairs(&redis_query(conn, &cmd, "stats", secrets).await?);
    let length = field(&info, "length")
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0);
    let entries_added = field(&info, "entries-added").and_then(|v| v.parse::<i64>().ok());
    let time = texts(&redis_query(conn, &redis::cmd("TIME"), "stats", secrets).await?);
    let now_ms = match (time.first(), time.get(1)) {
        (Some(s), Some(us)) => {
            s.parse::<f64>().unwrap_or(0.0) * 1000.0
                + (us.parse::<f64>().unwrap_or(0.0) / 1000.0).floor()
        }
        _ => return Err(Error::transport("stats: TIME gave no time")),
    };
    let now = format!("{}", now_ms as i64);
    let mut cmd = redis::cmd("ZCOUNT");
    cmd.arg(&t.delay_key).arg("-inf").arg(&now);
    let due = as_int(&redis_query(conn, &cmd, "stats", secrets).await?).unwrap_or(0);
    let mut cmd = redis::cmd("ZCARD");
    cmd.arg(&t.delay_key);
    let delayed_total = as_int(&redis_query(conn, &cmd, "stats", secrets).await?).unwrap_or(0);
    let mut cmd = redis::cmd("ZRANGEBYSCORE");
    cmd.arg(&t.delay_key)
        .arg("-inf")
        .arg(&now)
        .arg("WITHSCORES")
        .arg("LIMIT")
        .arg(0)
        .arg(1);
    let oldest_due = texts(&redis_query(conn, &cmd, "stats", secrets).await?)
        .get(1)
        .and_then(|score| score.parse::<f64>().ok())
        .map(|score| now_ms - score);
    let mut cmd = redis::cmd("XINFO");
    cmd.arg("GROUPS").arg(t.stream);
    let all = groups(&redis_query(conn, &cmd, "stats", secrets).await?);
    let chosen: Vec<_> = all
        .iter()
        .filter(|g| {
            t.group
                .is_none_or(|name| field(g, "name").as_deref() == Some(name))
        })
        .collect();
    if let (Some(name), true) = (t.group, chosen.is_empty()) {
        return Err(not_found(format!(
            "group {name} does not exist on stream {}",
            t.stream
        )));
    }
    let mut queues = Vec::with_capacity(chosen.len());
    for group in chosen {
        let name = field(group, "name").unwrap_or_default();
        let pending: i64 = field(group, "pending")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let read: Option<i64> = field(group, "entries-read").and_then(|v| v.parse().ok());
        let lag = field(group, "lag")
            .and_then(|v| v.parse::<i64>().ok())
            .or_else(|| Some(entries_added? - read?))
            .unwrap_or((length - pending).max(0));
        let last = field(group, "last-delivered-id").unwrap_or_else(|| "0-0".to_owned());
        let mut cmd = redis::cmd("XRANGE");
        cmd.arg(t.stream)
            .arg(format!("({last}"))
            .arg("+")
            .arg("COUNT")
            .arg(1);
        let first = texts(&redis_query(conn, &cmd, "stats", secrets).await?);
        let oldest_entry = first.first().and_then(|id| id_ms(id)).map(|ms| now_ms - ms);
        let oldest = match (oldest_entry, oldest_due) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        queues.push(QueueStats {
            name: format!("{}/{name}", t.stream),
            ready: lag + due,
            delayed: delayed_total - due,
            in_flight: pending,
            oldest_ready_age_ms: oldest.map(|ms| ms.max(0.0)),
            added: after.and_then(|c| Some(entries_added? - c)),
            backlog: lag + pending,
        });
    }
    Ok(Stats {
        cursor: entries_added.map(|n| n.to_string()),
        queues,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_is_read_only_and_names_the_table_once_per_from() {
        for sql in [PG_STATS, MYSQL_STATS, SQLITE_STATS] {
            let upper = sql.to_uppercase();
            for verb in [
                "INSERT",
                "UPDATE",
                "DELETE",
                "FOR UPDATE",
                "CREATE",
                "ALTER",
            ] {
                assert!(!upper.contains(verb), "{verb} in {sql}");
            }
            assert_eq!(sql.matches("FROM {t}").count(), 1);
        }
        assert!(cursor_value(Some("x")).is_err());
        assert_eq!(cursor_value(Some("42")).ok(), Some(Some(42)));
    }
}
