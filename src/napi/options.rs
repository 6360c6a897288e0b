//! The options of a native queue, as the JavaScript wrapper defaulted them, checked and turned
//! into a queue over its engine. Opens no connection.

use crate::engines::{redis, sql};
use crate::queue::batch::Backlog;
use crate::queue::engine::Engine;
use crate::queue::{self, Queue};
use crate::support::error::Error;
use crate::support::{dsn, durations, ident};
use napi::bindgen_prelude::within_runtime_if_available;
use std::sync::Arc;
use std::time::Duration;

/// Options of a native SQL queue, already defaulted by the JavaScript wrapper.
#[napi(object)]
pub struct SqlQueueOptions {
    pub dsn: String,
    pub table_name: String,
    pub queue_name: String,
    pub redeliver_timeout_seconds: f64,
    pub poll_interval_ms: f64,
    pub use_notify: bool,
    pub get_notify_timeout_ms: f64,
    pub auto_setup: bool,
    pub connect_timeout_ms: f64,
    pub max_queued_sends: f64,
    pub max_queued_send_bytes: f64,
    /// PostgreSQL: the DSN of the LISTEN connection, when `dsn` goes through a pooler.
    pub listen_dsn: Option<String>,
    /// The most connections this process opens to `dsn`, for every transport on it.
    pub max_connections: Option<f64>,
}

/// Options of a native Redis Streams queue, already defaulted by the JavaScript wrapper.
#[napi(object)]
pub struct RedisQueueOptions {
    pub dsn: String,
    pub stream: String,
    pub group: String,
    pub consumer: String,
    pub delay_key: String,
    pub claim_idle_ms: f64,
    pub poll_interval_ms: f64,
    pub read_batch_size: u32,
    pub cluster: bool,
    /// PEM certificate(s) to trust over TLS, instead of the system's roots.
    pub tls_ca: Option<String>,
    pub connect_timeout_ms: f64,
    pub max_queued_sends: f64,
    pub max_queued_send_bytes: f64,
    /// What `redisOptions` adds to the DSN.
    pub overrides: Option<RedisOverrides>,
    /// The most connections this process opens to the node, for every transport on it.
    pub max_connections: Option<f64>,
    /// Replicas a send's write must reach before the send resolves (0: none).
    pub wait_for_replicas: Option<u32>,
}

/// `redisOptions` the DSN says nothing of, checked by the JavaScript wrapper (which refuses
/// one the DSN contradicts).
#[napi(object)]
#[derive(Default)]
pub struct RedisOverrides {
    /// Prepended to every key (ioredis's `keyPrefix`).
    pub key_prefix: String,
    /// TLS even for `redis://`.
    pub tls: bool,
    /// Client certificate chain and key (PEM).
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    /// Accept any server certificate.
    pub tls_insecure: bool,
    pub port: Option<u32>,
    pub db: Option<u32>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// No `CLIENT SETINFO` on connecting.
    pub disable_client_info: bool,
    /// The server's Unix socket, instead of the DSN's host and port (ioredis's `path`).
    pub path: Option<String>,
    /// The deployment's sentinels (ioredis's `sentinels`), with `name`, the master's name.
    pub sentinels: Option<Vec<SentinelAddress>>,
    pub name: Option<String>,
    /// The sentinels' own credentials.
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
}

/// One sentinel, as ioredis's `sentinels` lists them.
#[napi(object)]
pub struct SentinelAddress {
    pub host: String,
    pub port: u32,
}

fn sentinel_addresses(given: Vec<SentinelAddress>) -> Result<Vec<(String, u16)>, Error> {
    given
        .into_iter()
        .map(|SentinelAddress { host, port }| match u16::try_from(port) {
            Ok(port) if port > 0 => Ok((host, port)),
            _ => Err(Error::invalid_argument(format!(
                "Invalid redisOptions.sentinels port {port}: expected 1 to 65535."
            ))),
        })
        .collect()
}

pub(super) fn millis(value: f64, name: &str) -> Result<Duration, Error> {
    if value.is_finite() && value >= 0.0 {
        Ok(durations::millis(value))
    } else {
        Err(Error::invalid_argument(format!(
            "{name} must be a finite number >= 0, got {value}."
        )))
    }
}

/// `maxConnections` as a count.
fn connection_budget(value: f64) -> Result<u32, Error> {
    if value.is_finite() && value.fract() == 0.0 && (1.0..=f64::from(u16::MAX)).contains(&value) {
        Ok(value as u32)
    } else {
        Err(Error::invalid_argument(format!(
            "maxConnections must be a positive integer, got {value}."
        )))
    }
}

/// The send backlog the options ask for (`maxQueuedSends`, `maxQueuedSendBytes`).
fn send_backlog(items: f64, bytes: f64) -> Result<Backlog, Error> {
    for (name, value) in [("maxQueuedSends", items), ("maxQueuedSendBytes", bytes)] {
        if !(value.is_finite() && value >= 1.0 && value.fract() == 0.0) {
            return Err(Error::invalid_argument(format!(
                "{name} must be a positive integer, got {value}."
            )));
        }
    }
    // Beyond usize on a 32-bit host: as good as unbounded.
    Ok(Backlog {
        items: items as usize,
        bytes: bytes as usize,
    })
}

/// A SQL queue: validates options and binds to the shared pool; opens no connection.
pub fn sql_queue(options: SqlQueueOptions) -> Result<Queue, Error> {
    let dsn = dsn::parse_sql_dsn(&options.dsn)?.with_listen(options.listen_dsn.as_deref())?;
    ident::validate_table_name(&options.table_name)?;
    ident::validate_queue_name(&options.queue_name)?;
    let redeliver = options.redeliver_timeout_seconds;
    if !redeliver.is_finite() || redeliver < 0.0 {
        return Err(Error::invalid_argument(format!(
            "redeliverTimeoutSeconds must be a finite number >= 0, got {redeliver}."
        )));
    }
    let backlog = send_backlog(options.max_queued_sends, options.max_queued_send_bytes)?;
    let config = sql::QueueConfig {
        table: options.table_name,
        queue: options.queue_name,
        // Past a century a lease never lapses in practice; beyond some thousands of
        // years `now() - lease` leaves PostgreSQL's timestamp range.
        redeliver_timeout_seconds: redeliver.min(durations::LONGEST.as_secs_f64()),
        use_notify: options.use_notify,
        connect_timeout: millis(options.connect_timeout_ms, "connectTimeoutMs")?,
        poll_interval: millis(options.poll_interval_ms, "pollIntervalMs")?,
        notify_timeout: millis(options.get_notify_timeout_ms, "getNotifyTimeoutMs")?,
        max_connections: options.max_connections.map(connection_budget).transpose()?,
    };
    // Pools spawn their maintenance task on creation: give them napi's runtime.
    let engine = within_runtime_if_available(|| sql::open_engine(&dsn, config))?;
    Ok(Queue::new(
        engine,
        options.auto_setup,
        queue::limits::FIRST_CLAIM_BATCH,
        backlog,
    ))
}

/// A Redis Streams queue: validates options and prepares the connection target;
/// opens no connection.
pub fn redis_queue(options: RedisQueueOptions) -> Result<Queue, Error> {
    let dsn = dsn::parse_redis_dsn(&options.dsn)?;
    for (name, value) in [
        ("stream", &options.stream),
        ("group", &options.group),
        ("consumer", &options.consumer),
        ("delayKey", &options.delay_key),
    ] {
        if value.is_empty() {
            return Err(Error::invalid_argument(format!(
                "{name} must be a non-empty string."
            )));
        }
    }
    let given = options.overrides.unwrap_or_default();
    let port = given
        .port
        .map(|port| match u16::try_from(port) {
            Ok(port) if port > 0 => Ok(port),
            _ => Err(Error::invalid_argument(format!(
                "Invalid redisOptions.port {port}: expected 1 to 65535."
            ))),
        })
        .transpose()?;
    let prefix = given.key_prefix;
    let config = redis::StreamConfig {
        stream: format!("{prefix}{}", options.stream),
        group: options.group,
        consumer: options.consumer,
        delay_key: format!("{prefix}{}", options.delay_key),
        key_prefix: prefix,
        claim_idle: millis(options.claim_idle_ms, "claimIdleMs")?,
        poll_interval: millis(options.poll_interval_ms, "pollIntervalMs")?,
        connect: redis::connection::ConnectOptions {
            cluster: options.cluster,
            tls_ca: options.tls_ca.map(|ca| ca.into_bytes()),
            connect_timeout: millis(options.connect_timeout_ms, "connectTimeoutMs")?,
            overrides: redis::connection::Overrides {
                tls: given.tls,
                tls_cert: given.tls_cert.map(String::into_bytes),
                tls_key: given.tls_key.map(String::into_bytes),
                tls_insecure: given.tls_insecure,
                port,
                db: given.db.map(i64::from),
                username: given.username,
                password: given.password,
                skip_client_info: given.disable_client_info,
                path: given.path,
                sentinels: sentinel_addresses(given.sentinels.unwrap_or_default())?,
                sentinel_name: given.name,
                sentinel_username: given.sentinel_username,
                sentinel_password: given.sentinel_password,
            },
        },
        max_connections: options.max_connections.map(connection_budget).transpose()?,
        wait_for_replicas: options.wait_for_replicas.unwrap_or(0),
    };
    let first_batch = options
        .read_batch_size
        .clamp(1, queue::limits::MAX_CLAIM_BATCH);
    let backlog = send_backlog(options.max_queued_sends, options.max_queued_send_bytes)?;
    let engine: Arc<dyn Engine> =
        within_runtime_if_available(|| redis::RedisQueue::open(&dsn, config).map(Arc::new))?;
    Ok(Queue::new(engine, true, first_batch, backlog))
}
