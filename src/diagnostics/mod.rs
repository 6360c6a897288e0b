//! Diagnostics for operators: `doctor` (is this DSN, table or stream fit for the transports?)
//! and `stats` (what is in the queues right now), behind the CLI's `doctor` and `stats`
//! commands (`bin/nestjs-messenger-native.js`).
//!
//! One concern per file: `checks` (verdicts, the report, version and clock judgements),
//! `schema` (the shared table's expected shape and the drift found), `connect` (connections
//! made as the transports make theirs, every wait bounded, errors without secrets),
//! `sql_doctor/` (one file per dialect) and `redis_doctor` (the checks of each engine), `redis_values` (reply
//! reading), `stats` (the samples) and `exports` (the napi functions). Nothing here creates,
//! changes or claims anything a transport uses. It imports `engines` (their dialects and
//! connections), `queue` and `support`; only `napi` is above it.

pub mod checks;
mod connect;
#[cfg(not(test))]
mod exports;
mod redis_doctor;
mod redis_values;
pub mod schema;
mod sql_doctor;
pub mod stats;

use crate::support::dsn::{parse_redis_dsn, parse_sql_dsn};
use checks::Report;
use std::time::Duration;

/// What `doctor` looks at and `stats` samples. Unset names take the transports' defaults.
#[derive(Debug, Clone, Default)]
pub struct Target {
    pub dsn: String,
    pub table: Option<String>,
    /// A queue of the table whose name is checked and whose messages are counted.
    pub queue: Option<String>,
    pub stream: Option<String>,
    pub group: Option<String>,
    pub delay_key: Option<String>,
    pub cluster: bool,
    pub connect_timeout: Duration,
    /// The transports create a missing table on first use (`autoSetup`).
    pub auto_setup: bool,
}

/// The table the SQL transports use by default.
pub const DEFAULT_TABLE: &str = "messenger_messages";
/// The consumer group the Redis transport uses by default.
pub const DEFAULT_GROUP: &str = "messenger";

/// Whether a DSN names Redis (anything else is taken for SQL).
fn is_redis(dsn: &str) -> bool {
    let scheme = dsn.split_once(':').map_or("", |(s, _)| s);
    scheme.eq_ignore_ascii_case("redis") || scheme.eq_ignore_ascii_case("rediss")
}

/// Runs every check that applies to the DSN's engine; never fails (a failure is a check).
pub async fn doctor(request: &Target) -> Report {
    if is_redis(&request.dsn) {
        let dsn = match parse_redis_dsn(&request.dsn) {
            Ok(dsn) => dsn,
            Err(err) => return invalid_dsn(err),
        };
        let mut report = Report::new(&dsn.secrets);
        let target = redis_doctor::StreamTarget {
            dsn: &dsn,
            cluster: request.cluster,
            stream: request.stream.as_deref(),
            group: request.group.as_deref().unwrap_or(DEFAULT_GROUP),
            delay_key: request.delay_key.as_deref(),
            connect_timeout: request.connect_timeout,
        };
        redis_doctor::doctor(&mut report, &target).await;
        report
    } else {
        let dsn = match parse_sql_dsn(&request.dsn) {
            Ok(dsn) => dsn,
            Err(err) => return invalid_dsn(err),
        };
        let mut report = Report::new(&dsn.secrets);
        let target = sql_doctor::steps::SqlTarget {
            dsn: &dsn,
            table: request.table.as_deref().unwrap_or(DEFAULT_TABLE),
            connect_timeout: request.connect_timeout,
            auto_setup: request.auto_setup,
        };
        sql_doctor::doctor(&mut report, &target).await;
        let table_found = report
            .checks
            .iter()
            .any(|c| c.name == "table" && c.status == checks::Status::Ok);
        if let (Some(queue), true) = (request.queue.as_deref(), table_found) {
            queue_check(&mut report, &target, queue).await;
        }
        report
    }
}

/// The `queue` line: the name as the transport accepts it, and what the queue holds.
async fn queue_check(report: &mut Report, target: &sql_doctor::steps::SqlTarget<'_>, queue: &str) {
    if let Err(err) = crate::support::ident::validate_queue_name(queue) {
        report.fail("queue", err.message);
        return;
    }
    let sample = stats::sql_stats(&stats::SqlStatsTarget {
        dsn: target.dsn,
        table: target.table,
        queue: Some(queue),
        cursor: None,
        connect_timeout: target.connect_timeout,
    })
    .await;
    match sample {
        Ok(sample) => match sample.queues.first() {
            Some(q) => report.pass(
                "queue",
                format!(
                    "{queue}: {} ready, {} delayed, {} in flight",
                    q.ready, q.delayed, q.in_flight
                ),
            ),
            None => report.pass("queue", format!("{queue}: no messages")),
        },
        Err(err) => report.fail("queue", err.message),
    }
}

fn invalid_dsn(err: crate::support::error::Error) -> Report {
    // The parser's message shows the DSN redacted already.
    let mut report = Report::default();
    report.fail("dsn", err.message);
    report
}

/// One sample of the DSN's queues or stream groups; `cursor` is the previous sample's, for
/// `added`.
pub async fn stats(
    request: &Target,
    cursor: Option<&str>,
) -> crate::support::error::Result<stats::Stats> {
    if is_redis(&request.dsn) {
        let dsn = parse_redis_dsn(&request.dsn)?;
        let Some(stream) = request.stream.as_deref() else {
            return Err(crate::support::error::Error::invalid_argument(
                "stats on Redis needs --stream.",
            ));
        };
        stats::stream_stats(&stats::StreamStatsTarget {
            dsn: &dsn,
            cluster: request.cluster,
            stream,
            group: request.group.as_deref(),
            delay_key: request
                .delay_key
                .clone()
                .unwrap_or_else(|| format!("{stream}:delayed")),
            cursor,
            connect_timeout: request.connect_timeout,
        })
        .await
    } else {
        let dsn = parse_sql_dsn(&request.dsn)?;
        stats::sql_stats(&stats::SqlStatsTarget {
            dsn: &dsn,
            table: request.table.as_deref().unwrap_or(DEFAULT_TABLE),
            queue: request.queue.as_deref(),
            cursor,
            connect_timeout: request.connect_timeout,
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_dsns_are_told_from_sql_ones() {
        assert!(is_redis("redis://h:6379"));
        assert!(is_redis("REDISS://h"));
        assert!(!is_redis("postgres://u@h/db"));
        assert!(!is_redis("sqlite://x.db"));
    }

    #[tokio::test]
    async fn a_bad_dsn_is_one_failed_check_without_its_password() {
        let report = doctor(&Target {
            dsn: "ftp://u:hunter2@h/x".to_owned(),
            ..Default::default()
        })
        .await;
        assert!(!report.ok());
        assert_eq!(report.checks.len(), 1);
        assert_eq!(report.checks[0].name, "dsn");
        assert!(!report.checks[0].detail.contains("hunter2"));
    }
}
