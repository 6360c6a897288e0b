//! The napi functions behind the CLI: plain objects in, plain objects out. Kept out of
//! `cargo test` like the other exports (the test binary has no Node to link against).

use super::{checks::Report, stats::Stats, Target};
use std::time::Duration;

/// The transports' default connect timeout.
const DEFAULT_CONNECT_TIMEOUT_MS: f64 = 5000.0;

fn connect_timeout(ms: Option<f64>) -> napi::Result<Duration> {
    let ms = ms.unwrap_or(DEFAULT_CONNECT_TIMEOUT_MS);
    if ms.is_finite() && ms > 0.0 {
        Ok(crate::support::durations::millis(ms))
    } else {
        Err(crate::support::error::Error::invalid_argument(format!(
            "connectTimeoutMs must be a finite number > 0, got {ms}."
        ))
        .into())
    }
}

/// What `doctor` looks at; unset names take the transports' defaults.
#[napi(object)]
pub struct DoctorOptions {
    pub dsn: String,
    pub table: Option<String>,
    pub queue: Option<String>,
    pub stream: Option<String>,
    pub group: Option<String>,
    pub delay_key: Option<String>,
    pub cluster: Option<bool>,
    pub connect_timeout_ms: Option<f64>,
    /// Whether the transports create what is missing on first use (`autoSetup`, default true):
    /// then a missing table is a warning, else a failure.
    pub auto_setup: Option<bool>,
}

/// One check: `status` is `ok`, `warn` or `FAIL`.
#[napi(object)]
pub struct DoctorCheck {
    pub name: String,
    pub status: String,
    pub detail: String,
}

/// `ok` is false when any check failed.
#[napi(object)]
pub struct DoctorReport {
    pub ok: bool,
    pub checks: Vec<DoctorCheck>,
}

impl From<Report> for DoctorReport {
    fn from(report: Report) -> Self {
        Self {
            ok: report.ok(),
            checks: report
                .checks
                .into_iter()
                .map(|c| DoctorCheck {
                    name: c.name,
                    status: c.status.as_str().to_owned(),
                    detail: c.detail,
                })
                .collect(),
        }
    }
}

/// Checks a DSN (and a table, or a stream and group) the way the transports would use them.
/// Never rejects for a failed check: failures are checks of the report.
#[napi]
pub async fn doctor(options: DoctorOptions) -> napi::Result<DoctorReport> {
    let target = Target {
        dsn: options.dsn,
        table: options.table,
        queue: options.queue,
        stream: options.stream,
        group: options.group,
        delay_key: options.delay_key,
        cluster: options.cluster.unwrap_or(false),
        connect_timeout: connect_timeout(options.connect_timeout_ms)?,
        auto_setup: options.auto_setup.unwrap_or(true),
    };
    Ok(super::doctor(&target).await.into())
}

/// What `stats` samples; `cursor` is the previous sample's, for `added`.
#[napi(object)]
pub struct StatsOptions {
    pub dsn: String,
    pub table: Option<String>,
    pub queue: Option<String>,
    pub stream: Option<String>,
    pub group: Option<String>,
    pub delay_key: Option<String>,
    pub cluster: Option<bool>,
    pub cursor: Option<String>,
    pub connect_timeout_ms: Option<f64>,
}

/// One queue's (or `<stream>/<group>`'s) numbers.
#[napi(object)]
pub struct QueueSample {
    pub name: String,
    pub ready: f64,
    pub delayed: f64,
    pub in_flight: f64,
    pub oldest_ready_age_ms: Option<f64>,
    pub added: Option<f64>,
    pub backlog: f64,
}

#[napi(object)]
pub struct StatsSample {
    pub cursor: Option<String>,
    pub queues: Vec<QueueSample>,
}

impl From<Stats> for StatsSample {
    fn from(stats: Stats) -> Self {
        Self {
            cursor: stats.cursor,
            queues: stats
                .queues
                .into_iter()
                .map(|q| QueueSample {
                    name: q.name,
                    ready: q.ready as f64,
                    delayed: q.delayed as f64,
                    in_flight: q.in_flight as f64,
                    oldest_ready_age_ms: q.oldest_ready_age_ms,
                    added: q.added.map(|n| n as f64),
                    backlog: q.backlog as f64,
                })
                .collect(),
        }
    }
}

/// One read-only sample of a table's queues or a stream's groups.
#[napi]
pub async fn queue_stats(options: StatsOptions) -> napi::Result<StatsSample> {
    let target = Target {
        dsn: options.dsn,
        table: options.table,
        queue: options.queue,
        stream: options.stream,
        group: options.group,
        delay_key: options.delay_key,
        cluster: options.cluster.unwrap_or(false),
        connect_timeout: connect_timeout(options.connect_timeout_ms)?,
        auto_setup: true,
    };
    Ok(super::stats(&target, options.cursor.as_deref())
        .await?
        .into())
}
