//! `doctor` for Redis Streams: reachability, server version and XAUTOCLAIM, the clock, and
//! for a stream: on a cluster whether the stream and its delayed zset share a slot (the
//! transport's scripts use both at once), the stream, its group, the group's pending count and
//! the delayed zset. Read-only commands only, each bounded.

use super::checks::{judge_clock, judge_version, Report};
use super::connect::{host_now_ms, open_redis, redis_query};
use super::redis_values::{as_int, as_text, field, groups, texts};
use crate::engines::redis::connection::Conn;
use crate::engines::redis::slot::slot;
use crate::support::dsn::RedisDsn;
use std::time::Duration;

/// What the Redis doctor looks at.
pub struct StreamTarget<'a> {
    pub dsn: &'a RedisDsn,
    pub cluster: bool,
    pub stream: Option<&'a str>,
    pub group: &'a str,
    pub delay_key: Option<&'a str>,
    pub connect_timeout: Duration,
}

impl StreamTarget<'_> {
    /// The delayed zset's key: given, or the transport's default `<stream>:delayed`.
    pub fn delay_key(&self, stream: &str) -> String {
        self.delay_key
            .map_or_else(|| format!("{stream}:delayed"), str::to_owned)
    }
}

pub async fn doctor(report: &mut Report, t: &StreamTarget<'_>) {
    let (mut conn, ms) = match open_redis(t.dsn, t.cluster, t.connect_timeout).await {
        Ok(opened) => opened,
        Err(err) => {
            report.fail("connect", err.message);
            return;
        }
    };
    let mode = if t.cluster { " (cluster)" } else { "" };
    report.pass("connect", format!("{}{mode} in {ms} ms", t.dsn.redacted));
    let secrets = &t.dsn.secrets;
    let mut cmd = redis::cmd("INFO");
    cmd.arg("server");
    match redis_query(&mut conn, &cmd, "server version", secrets).await {
        Ok(info) => {
            // A cluster answers from every node: the oldest one is what counts.
            let oldest = texts(&info)
                .iter()
                .filter_map(|text| {
                    text.lines()
                        .find_map(|l| l.strip_prefix("redis_version:"))
                        .map(|v| v.trim().to_owned())
                })
                .min_by_key(|v| super::checks::version_numbers(v));
            match oldest {
                Some(version) => judge_version(
                    report,
                    "server version",
                    "Redis",
                    &version,
                    (6, 2, 0),
                    "XAUTOCLAIM",
                ),
                None => report.fail("server version", "INFO server has no redis_version"),
            }
        }
        Err(err) => report.fail("server version", err.message),
    }
    let mut cmd = redis::cmd("COMMAND");
    cmd.arg("INFO").arg("XAUTOCLAIM");
    match redis_query(&mut conn, &cmd, "xautoclaim", secrets).await {
        Ok(redis::Value::Array(items)) if items.iter().any(|v| !matches!(v, redis::Value::Nil)) => {
            report.pass(
                "xautoclaim",
                "supported: stalled entries of dead consumers are taken over",
            )
        }
        Ok(_) => report.fail(
            "xautoclaim",
            "XAUTOCLAIM is unknown to this server (Redis ≥ 6.2 needed)",
        ),
        Err(err) => report.fail("xautoclaim", err.message),
    }
    let sent = host_now_ms();
    match redis_query(&mut conn, &redis::cmd("TIME"), "clock", secrets).await {
        Ok(time) => {
            let parts = texts(&time);
            let secs: f64 = parts
                .first()
                .and_then(|s| s.parse().ok())
                .unwrap_or(f64::NAN);
            let micros: f64 = parts.get(1).and_then(|s| s.parse().ok()).unwrap_or(0.0);
            judge_clock(report, secs * 1000.0 + micros / 1000.0, sent, host_now_ms());
        }
        Err(err) => report.fail("clock", err.message),
    }
    if t.cluster {
        tracking_check(report, &mut conn, secrets).await;
    }
    if let Some(stream) = t.stream {
        stream_checks(report, t, &mut conn, stream).await;
    }
}

/// On a cluster, idle consumers are woken by the nodes' key tracking: whether this user may
/// turn it on (`CLIENT TRACKING OFF` needs the same permission and changes nothing here).
async fn tracking_check(report: &mut Report, conn: &mut Conn, secrets: &[String]) {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("TRACKING").arg("OFF");
    match redis_query(conn, &cmd, "tracking", secrets).await {
        Ok(_) => report.pass(
            "tracking",
            "CLIENT TRACKING allowed: idle consumers are woken by the nodes' key tracking",
        ),
        Err(err) => report.warn(
            "tracking",
            format!(
                "CLIENT TRACKING refused ({}): idle consumers claim each pollIntervalMs instead; grant the user +client|tracking",
                err.message
            ),
        ),
    }
}

/// What `command key` answers (XLEN, ZCARD) for a key whose type was just read; 0 if it fails.
async fn size_of(
    conn: &mut Conn,
    (command, key): (&str, &str),
    what: &str,
    secrets: &[String],
) -> i64 {
    let mut cmd = redis::cmd(command);
    cmd.arg(key);
    redis_query(conn, &cmd, what, secrets)
        .await
        .ok()
        .and_then(|v| as_int(&v))
        .unwrap_or(0)
}

async fn stream_checks(report: &mut Report, t: &StreamTarget<'_>, conn: &mut Conn, stream: &str) {
    let secrets = &t.dsn.secrets;
    let delay_key = t.delay_key(stream);
    if t.cluster {
        let (a, b) = (slot(stream), slot(&delay_key));
        if a == b {
            report.pass("slot", format!("{stream} and {delay_key} share slot {a}"));
        } else {
            report.fail(
                "slot",
                format!(
                    "{stream} is in slot {a} but {delay_key} in slot {b}: the transport refuses them; put a hash tag in the stream name (e.g. \"messenger:{{async}}\") or give both keys the same {{tag}}"
                ),
            );
        }
    }
    let mut cmd = redis::cmd("TYPE");
    cmd.arg(stream);
    let kind = match redis_query(conn, &cmd, "stream", secrets).await {
        Ok(value) => as_text(&value).unwrap_or_default(),
        Err(err) => {
            report.fail("stream", err.message);
            return;
        }
    };
    match kind.as_str() {
        "stream" => {
            let len = size_of(conn, ("XLEN", stream), "stream", secrets).await;
            report.pass("stream", format!("{stream} exists ({len} entries)"));
        }
        "none" => {
            report.fail(
                "stream",
                format!(
                    "{stream} does not exist (a transport creates it with its group on first use)"
                ),
            );
            return;
        }
        other => {
            report.fail("stream", format!("{stream} is a {other}, not a stream"));
            return;
        }
    }
    let mut cmd = redis::cmd("XINFO");
    cmd.arg("GROUPS").arg(stream);
    match redis_query(conn, &cmd, "group", secrets).await {
        Ok(value) => {
            let all = groups(&value);
            match all
                .iter()
                .find(|g| field(g, "name").as_deref() == Some(t.group))
            {
                Some(group) => {
                    let consumers = field(group, "consumers").unwrap_or_default();
                    let pending = field(group, "pending").unwrap_or_default();
                    report.pass(
                        "group",
                        format!("{} exists ({consumers} consumers)", t.group),
                    );
                    report.pass(
                        "pending",
                        format!("{pending} entries delivered and not acked"),
                    );
                }
                None => {
                    let names: Vec<String> = all.iter().filter_map(|g| field(g, "name")).collect();
                    report.fail(
                        "group",
                        format!(
                            "group {} does not exist on {stream} (groups: {})",
                            t.group,
                            if names.is_empty() {
                                "none".to_owned()
                            } else {
                                names.join(", ")
                            }
                        ),
                    );
                }
            }
        }
        Err(err) => report.fail("group", err.message),
    }
    let mut cmd = redis::cmd("TYPE");
    cmd.arg(&delay_key);
    match redis_query(conn, &cmd, "delayed", secrets).await {
        Ok(value) => match as_text(&value).unwrap_or_default().as_str() {
            "zset" => {
                let n = size_of(conn, ("ZCARD", &delay_key), "delayed", secrets).await;
                report.pass("delayed", format!("{delay_key}: {n} delayed messages"));
            }
            "none" => report.pass("delayed", format!("{delay_key}: no delayed messages")),
            other => report.fail(
                "delayed",
                format!("{delay_key} is a {other}, not a sorted set"),
            ),
        },
        Err(err) => report.fail("delayed", err.message),
    }
}
