//! One stream (its consumer group and delayed zset) as this process sees it: `Stream`, what a
//! consumer's reading and writing sides both use, on the deployment its queues share per
//! process and DSN (`RedisShared`), and how its operations report failures and ride them out.
//! Invariant: the command connection and the wake signals belong to the shared deployment and
//! the last queue to leave it closes them, as does the read (on a cluster, the key tracking)
//! its idle consumers share (`idle_read`); only a consumer that has reached the server once
//! waits out connection failures, and a write is repeated only after a connection failure,
//! once.

use super::connection::{Conn, ConnectOptions, Target};
use super::errors;
use super::idle_read::IdleRead;
use super::read_budget::ReadBudget;
use super::slot;
use crate::queue::wake::{WakeBoard, WakeSignal};
use crate::support::dsn::RedisDsn;
use crate::support::error::{Cause, Error, Outcome, Result};
use crate::support::targets::{same_budget, Targets};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

/// Options of one stream consumer. The keys are as stored: `key_prefix` already put before
/// them.
#[derive(Debug, Clone)]
pub struct StreamConfig {
    /// Prepended to every key the queue touches (ioredis's `keyPrefix`); may be empty.
    pub key_prefix: String,
    pub stream: String,
    pub group: String,
    pub consumer: String,
    pub delay_key: String,
    pub claim_idle: Duration,
    pub poll_interval: Duration,
    pub connect: ConnectOptions,
    /// `maxConnections`: the budget of every connection to the node in this process.
    pub max_connections: Option<u32>,
    /// `waitForReplicas`: replicas a send's write must reach (`WAIT`) before it is answered.
    pub wait_for_replicas: u32,
}

/// The deployment shared by every stream queue of the process on one DSN.
pub(super) struct RedisShared {
    key: String,
    pub(super) target: Target,
    pub(super) secrets: Vec<String>,
    pub(super) connect_timeout: Duration,
    commands: tokio::sync::Mutex<Option<Conn>>,
    board: WakeBoard,
    /// The blocking read (on a cluster, the key tracking) and poll its idle consumers share.
    pub(super) idle: Arc<IdleRead>,
    /// Consumers of the deployment in an idle wait now.
    pub(super) idle_consumers: AtomicUsize,
    /// `maxConnections`, and the consumers' own reads it leaves room for.
    pub(super) reads: ReadBudget,
}

impl Drop for RedisShared {
    fn drop(&mut self) {
        self.idle.close();
    }
}

static TARGETS: LazyLock<Targets<RedisShared>> = LazyLock::new(Targets::default);

impl RedisShared {
    /// The shared command connection if it is open (housekeeping opens none of its own).
    pub(super) async fn open_conn(&self) -> Option<Conn> {
        self.commands.lock().await.clone()
    }

    /// The shared command connection, made on first use. Until it exists, failures are
    /// reported at once (an unreachable server fails fast, not after minutes of retries).
    pub(super) async fn conn(&self, op: &str) -> Result<Conn> {
        let mut slot = self.commands.lock().await;
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let made = tokio::time::timeout(
            self.connect_timeout,
            self.target.command_connection(self.connect_timeout),
        )
        .await
        .map_err(|_| self.no_answer(op))?
        // Nothing went out on a connection that could not be made.
        .map_err(|e| self.error(op, &e).with_outcome(Outcome::NotApplied))?;
        *slot = Some(made.clone());
        Ok(made)
    }

    pub(super) fn error(&self, op: &str, err: &redis::RedisError) -> Error {
        errors::error_during(op, err, &self.secrets)
    }

    pub(super) fn no_answer(&self, op: &str) -> Error {
        let detail = format!(
            "no answer from the server within {} ms",
            self.connect_timeout.as_millis()
        );
        Error::connection(format!("Redis transport failed during \"{op}\": {detail}"))
            .caused_by(Cause::timed_out(detail))
            .with_outcome(Outcome::NotApplied)
    }
}

/// One stream (and its group and delayed zset) on the deployment this process shares: what
/// the reading and the writing side of a consumer both use.
pub(super) struct Stream {
    pub(super) shared: Arc<RedisShared>,
    pub(super) config: StreamConfig,
    pub(super) wake: Arc<WakeSignal>,
    /// Bumped when a queue of this process adds a delayed message to the stream, so blocked
    /// reads re-plan their wait.
    pub(super) delayed_added: Arc<WakeSignal>,
    /// Milliseconds until the next delayed member is due, as the last promotion (or this
    /// process's last delayed send) saw it.
    pub(super) next_due: Mutex<Option<Duration>>,
    /// Once the server answered, connection failures in get() are waited out, not thrown.
    pub(super) contacted: AtomicBool,
    /// The queue's counters (`stats()`): the ids this consumer tracks are counted there.
    pub(super) counters: std::sync::OnceLock<Arc<crate::queue::stats::Counters>>,
}

impl StreamConfig {
    /// A key of the stream's own (see `slot::beside`), under the key prefix like every key
    /// (so it may not share the stream's slot: such keys serve single nodes only).
    pub(super) fn beside(&self, suffix: &str) -> Option<String> {
        let unprefixed = self
            .stream
            .strip_prefix(self.key_prefix.as_str())
            .unwrap_or(&self.stream);
        slot::beside(unprefixed, suffix).map(|key| format!("{}{key}", self.key_prefix))
    }
}

impl Stream {
    /// The stream of `config` on the deployment this process shares for `dsn` (joined, or
    /// made on first use).
    pub(super) fn open(dsn: &RedisDsn, config: StreamConfig) -> Result<Arc<Self>> {
        if config.connect.cluster {
            slot::check_same_slot(&config.stream, &config.delay_key)?;
        }
        // Everything the shared connections are made with: a transport with another CA,
        // timeout or redisOptions gets connections of its own, never the first transport's.
        let key = format!(
            "{}|connect={:x}|connect_timeout_ms={}",
            dsn.url,
            config.connect.digest(),
            config.connect.connect_timeout.as_millis()
        );
        if config.connect.cluster && config.max_connections.is_some() {
            return Err(Error::invalid_argument(
                "maxConnections applies to a single Redis node: on a cluster a process holds \
                 two connections per node whatever the number of queues, one for commands and \
                 one for its idle consumers' key tracking.",
            ));
        }
        let asked = config.max_connections;
        let fits = |live: &RedisShared| same_budget(asked, live.reads.max_connections);
        let shared = TARGETS.join_if(&key, fits, || {
            Ok(RedisShared {
                key: key.clone(),
                target: Target::new(dsn, &config.connect)?,
                secrets: config.connect.secrets(dsn),
                connect_timeout: config.connect.connect_timeout,
                commands: tokio::sync::Mutex::new(None),
                board: WakeBoard::default(),
                idle: Arc::default(),
                idle_consumers: AtomicUsize::new(0),
                reads: ReadBudget::new(asked)?,
            })
        })?;
        let wake = shared.board.signal(&config.stream, "");
        let delayed_added = shared.board.signal(&config.stream, "delayed");
        Ok(Arc::new(Stream {
            shared,
            config,
            wake,
            delayed_added,
            next_due: Mutex::new(None),
            contacted: AtomicBool::new(false),
            counters: std::sync::OnceLock::new(),
        }))
    }

    /// Leaves the shared deployment, closing its command connection if this was the last
    /// queue on it.
    pub(super) async fn leave_shared(&self) {
        let shared = &self.shared;
        if TARGETS.leave(&shared.key, shared) {
            shared.idle.close();
            *shared.commands.lock().await = None;
        }
    }

    pub(super) async fn conn(&self, op: &str) -> Result<Conn> {
        let conn = self.shared.conn(op).await?;
        self.contacted.store(true, Ordering::Release);
        Ok(conn)
    }

    pub(super) fn err(&self, op: &str, e: &redis::RedisError) -> Error {
        self.shared.error(op, e)
    }

    /// Runs a write once more when the first attempt met a connection the server had
    /// dropped (the command connection reconnects on that failure; a write that failed on a
    /// broken connection was not applied, and acks and rejects are idempotent anyway).
    pub(super) async fn with_reconnect<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        match op().await {
            Err(err) if err.is_transient_connection() && self.contacted.load(Ordering::Acquire) => {
                op().await
            }
            other => other,
        }
    }

    /// Acks and deletes `ids` whoever holds them (foreign entries, `find()` results).
    pub(super) async fn ack_and_delete(&self, ids: Vec<String>, op: &str) -> Result<()> {
        let mut conn = self.conn(op).await?;
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("XACK")
            .arg(&self.config.stream)
            .arg(&self.config.group)
            .arg(&ids)
            .ignore()
            .cmd("XDEL")
            .arg(&self.config.stream)
            .arg(&ids)
            .ignore();
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(|e| self.err(op, &e))
    }
}
