//! The Redis Streams engine: one stream, its consumer group and delayed zset as one consumer
//! sees them (`RedisQueue`), the deployment its queues share per process and DSN
//! (`RedisShared`), and the `Engine` contract implemented over them. Invariant: the command
//! connection and the wake signals belong to the shared deployment and the last queue to
//! leave it closes them; the blocking connection is the consumer's own.

use super::connection::{Conn, ConnectOptions, Target};
use super::delivered::Delivered;
use super::errors::classify;
use super::replies::{as_i64, complete, is_stream_id, parse_entries};
use super::slot;
use super::writes::SendBatch;
use crate::queue::engine::WaitOutcome;
use crate::queue::engine::{Engine, Held, NewMessage, StoredMessage};
use crate::queue::wake::{WakeBoard, WakeSignal};
use crate::support::backoff::Backoff;
use crate::support::dsn::RedisDsn;
use crate::support::error::{ErrorKind, Result};
use crate::support::targets::Targets;
use futures_util::future::BoxFuture;
use redis::Value;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often a one-command send answered by a cluster redirect is sent again, and the pauses
/// between (about 0.3 s in all: a slot's keys move in milliseconds).
const MAX_REDIRECT_RESENDS: u32 = 5;
const REDIRECT_PAUSE: Duration = Duration::from_millis(10);
const MAX_REDIRECT_PAUSE: Duration = Duration::from_millis(160);

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
}

/// The deployment shared by every stream queue of the process on one DSN.
pub(super) struct RedisShared {
    key: String,
    pub(super) target: Target,
    pub(super) secrets: Vec<String>,
    pub(super) connect_timeout: Duration,
    commands: tokio::sync::Mutex<Option<Conn>>,
    board: WakeBoard,
}

static TARGETS: LazyLock<Targets<RedisShared>> = LazyLock::new(Targets::default);

impl RedisShared {
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
        .map_err(|e| self.error(op, &e))?;
        *slot = Some(made.clone());
        Ok(made)
    }
}

/// One stream (and its group and delayed zset) as one consumer sees it.
pub struct RedisQueue {
    pub(super) shared: Arc<RedisShared>,
    pub(super) config: StreamConfig,
    wake: Arc<WakeSignal>,
    /// This consumer's connection for blocking reads, and its `CLIENT ID` on a single node
    /// (so a block can be ended early with `CLIENT UNBLOCK` instead of dropping the connection).
    pub(super) blocking: tokio::sync::Mutex<Option<(Conn, Option<i64>)>>,
    /// Entries of our pending list the queue holds (skipped when re-reading it).
    pub(super) delivered: Mutex<Delivered>,
    /// Where the next claim re-reads our own pending entries from: `0` after a read whose
    /// reply may have been lost (entries it took sit in our PEL), the last id re-read while a
    /// re-read still finds full pages; `None` when there is nothing to re-read.
    pub(super) recover_from: Mutex<Option<String>>,
    pub(super) reclaim: Mutex<Reclaim>,
    /// Milliseconds until the next delayed member is due, as the last promotion saw it.
    pub(super) next_due: Mutex<Option<Duration>>,
    /// Once the server answered, connection failures in get() are waited out, not thrown.
    pub(super) contacted: AtomicBool,
    /// Bumped when a queue of this process adds a delayed message to the stream, so blocked
    /// reads re-plan their wait.
    pub(super) delayed_added: Arc<WakeSignal>,
    /// The queue's counters (`stats()`): the failures this engine rides out by itself are
    /// counted there, and its reconnects.
    pub(super) counters: std::sync::OnceLock<Arc<crate::queue::stats::Counters>>,
    /// A failure was ridden out: the next success is a reconnect.
    pub(super) riding: AtomicBool,
}

/// XAUTOCLAIM bookkeeping: run every `claimIdleMs / 2` (not on every read), cursor kept.
pub(super) struct Reclaim {
    pub(super) cursor: String,
    pub(super) next_at: Instant,
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

impl RedisQueue {
    pub fn open(dsn: &RedisDsn, config: StreamConfig) -> Result<Self> {
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
        let shared = TARGETS.join(&key, || {
            Ok(RedisShared {
                key: key.clone(),
                target: Target::new(dsn, &config.connect)?,
                secrets: config.connect.secrets(dsn),
                connect_timeout: config.connect.connect_timeout,
                commands: tokio::sync::Mutex::new(None),
                board: WakeBoard::default(),
            })
        })?;
        let wake = shared.board.signal(&config.stream, "");
        let delayed_added = shared.board.signal(&config.stream, "delayed");
        Ok(Self {
            shared,
            wake,
            blocking: tokio::sync::Mutex::new(None),
            delivered: Mutex::default(),
            recover_from: Mutex::new(None),
            reclaim: Mutex::new(Reclaim {
                cursor: "0-0".to_owned(),
                next_at: Instant::now(),
            }),
            next_due: Mutex::new(None),
            contacted: AtomicBool::new(false),
            delayed_added,
            counters: std::sync::OnceLock::new(),
            riding: AtomicBool::new(false),
            config,
        })
    }

    pub(super) async fn conn(&self, op: &str) -> Result<Conn> {
        let conn = self.shared.conn(op).await?;
        self.contacted.store(true, Ordering::Release);
        Ok(conn)
    }

    /// Stores `batch` (attempts at one batch are the same batch: see `SendBatch`).
    pub(super) async fn insert_batch(
        &self,
        messages: &[NewMessage],
        batch: SendBatch,
    ) -> Result<Vec<String>> {
        // A connection found closed (the server dropped it while idle: a restart, a
        // CLIENT KILL; or just after it ran the batch) is re-made and the same batch sent
        // once more, if a first copy would be found (see `SendBatch::repeatable`): then it is
        // stored once however often it is sent. Otherwise (a cluster's XADDs), and after a
        // timeout (the server may still be working on it), the error says it may have been
        // stored.
        // A redirect proves the command did not run: it is sent again, with backoff,
        // while a migrating slot settles (the client follows only a couple by itself).
        let mut redirects = Backoff::new(REDIRECT_PAUSE, MAX_REDIRECT_PAUSE);
        let (mut redirected, mut resent) = (0, false);
        let ids = loop {
            match self.insert_once(messages, &batch).await {
                Ok(ids) => break ids,
                Err(failure) if failure.redirected && redirected < MAX_REDIRECT_RESENDS => {
                    redirected += 1;
                    tokio::time::sleep(redirects.next_pause()).await;
                }
                Err(failure)
                    if failure.may_send_again(&batch, resent)
                        && self.contacted.load(Ordering::Acquire) =>
                {
                    resent = true;
                }
                Err(failure) => return Err(failure.error),
            }
        };
        if let Some(earliest) = messages
            .iter()
            .filter(|m| m.delay_ms > 0.0)
            .map(|m| m.delay_ms)
            .reduce(f64::min)
        {
            // A blocked read of this instance re-plans its wait around the new member.
            let due = crate::support::durations::millis(earliest);
            let mut next_due = self.next_due.lock().unwrap_or_else(|p| p.into_inner());
            *next_due = Some(next_due.map_or(due, |known| known.min(due)));
            drop(next_due);
            self.delayed_added.wake();
        }
        Ok(ids)
    }

    /// Acks and deletes: by id those without a token (`find()` results), fenced by our
    /// pending ownership the others; returns how many fenced ones were no longer ours.
    async fn delete_held(&self, held: Vec<Held>) -> Result<u64> {
        let (fenced, by_id): (Vec<Held>, Vec<Held>) = held
            .into_iter()
            .filter(|h| is_stream_id(&h.id))
            .partition(|h| h.token.is_some());
        let by_id: Vec<String> = by_id.into_iter().map(|h| h.id).collect();
        if !by_id.is_empty() {
            self.with_reconnect(|| self.ack_and_delete(by_id.clone(), "ack"))
                .await?;
        }
        if fenced.is_empty() {
            return Ok(0);
        }
        let fenced: Vec<String> = fenced.into_iter().map(|h| h.id).collect();
        let settled = self
            .with_reconnect(|| self.settle_own(&fenced, "ack"))
            .await?;
        Ok((fenced.len() as u64).saturating_sub(settled))
    }
}

impl Engine for RedisQueue {
    fn attach_counters(&self, counters: Arc<crate::queue::stats::Counters>) {
        let _ = self.counters.set(counters);
    }

    fn wake_signal(&self) -> Arc<WakeSignal> {
        self.wake.clone()
    }

    /// Creates the consumer group from the stream's start (`0`, so entries sent before it
    /// existed are delivered), creating the stream if needed; an existing group is fine.
    fn setup(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let mut conn = self.conn("ensureGroup").await?;
            let created: redis::RedisResult<Value> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&self.config.stream)
                .arg(&self.config.group)
                .arg("0")
                .arg("MKSTREAM")
                .query_async(&mut conn)
                .await;
            match created {
                Ok(_) => Ok(()),
                Err(e) if e.code() == Some("BUSYGROUP") || e.to_string().contains("BUSYGROUP") => {
                    Ok(())
                }
                Err(e) => Err(self.err("ensureGroup", &e)),
            }
        })
    }

    fn insert(&self, messages: Vec<NewMessage>) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            let batch = SendBatch::new(&self.config, &messages);
            self.insert_batch(&messages, batch).await
        })
    }

    fn direct_wire(self: Arc<Self>) -> Option<Arc<dyn crate::queue::engine::DirectWire>> {
        super::direct::RedisWire::new(self)
            .map(|w| Arc::new(w) as Arc<dyn crate::queue::engine::DirectWire>)
    }

    fn claim(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(async move {
            let claimed = self.claim_once(limit).await;
            self.tolerate(claimed, Vec::new()).await
        })
    }

    fn idle<'a>(
        &'a self,
        _seen: u64,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<WaitOutcome>> {
        Box::pin(async move {
            if cancel.is_cancelled() {
                return Ok(WaitOutcome::Cancelled);
            }
            let limit = 64;
            let blocked = self.block_once(cancel, limit).await;
            self.tolerate(blocked, WaitOutcome::TimedOut).await
        })
    }

    fn delete(&self, held: Vec<Held>) -> BoxFuture<'_, Result<u64>> {
        Box::pin(async move {
            // Forgotten once written: until then a re-read of our own pending entries (after a
            // failed claim) must still skip them, or an ack waiting out an outage would see its
            // message delivered again. Each attempt names them as still held.
            let ids: Vec<String> = held.iter().map(|h| h.id.clone()).collect();
            self.name_delivered(&ids);
            let written = self.delete_held(held).await;
            match written {
                Ok(_) => self.forget_delivered(&ids),
                Err(_) => self.name_delivered(&ids),
            }
            written
        })
    }

    fn redeliver(&self, held: Held, copy: NewMessage) -> BoxFuture<'_, Result<Option<String>>> {
        Box::pin(async move {
            self.forget_delivered(std::slice::from_ref(&held.id));
            if !is_stream_id(&held.id) {
                return Ok(None);
            }
            self.with_reconnect(|| self.redeliver_once(&held.id, &copy))
                .await
        })
    }

    /// Entries claimed into our buffer but never handed out: their idle time is set to the
    /// claim threshold so any consumer's next XAUTOCLAIM takes them at once (ours included).
    fn release(&self, held: Vec<Held>) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let ids: Vec<String> = held.into_iter().map(|h| h.id).collect();
            self.forget_delivered(&ids);
            if ids.is_empty() {
                return Ok(());
            }
            self.renew_own(&ids, self.config.claim_idle, "release")
                .await?;
            let mut reclaim = self.reclaim.lock().unwrap_or_else(|p| p.into_inner());
            reclaim.next_at = Instant::now();
            reclaim.cursor = "0-0".to_owned();
            Ok(())
        })
    }

    fn keep_claimed(&self, held: Vec<Held>) -> BoxFuture<'_, Result<Vec<Held>>> {
        Box::pin(async move {
            let ids: Vec<String> = held.iter().map(|h| h.id.clone()).collect();
            // Held by the queue whatever the answer: named before and after (an answer can
            // take up to the connect timeout).
            self.name_delivered(&ids);
            let renewed = self.renew_own(&ids, Duration::ZERO, "reclaim").await;
            self.name_delivered(&ids);
            let renewed: std::collections::HashSet<String> = renewed?.into_iter().collect();
            // Not ours any more (another consumer took them over, or they were settled): the
            // queue drops them, and nothing of ours is left to skip.
            let lost: Vec<String> = ids.into_iter().filter(|id| !renewed.contains(id)).collect();
            self.forget_delivered(&lost);
            Ok(held
                .into_iter()
                .filter(|h| renewed.contains(&h.id))
                .collect())
        })
    }

    fn claim_lease(&self) -> Duration {
        self.config.claim_idle
    }

    /// Getting the command connection, then the pipeline: each within the connect timeout.
    fn send_bound(&self) -> Duration {
        self.shared.connect_timeout * 2 + Duration::from_secs(1)
    }

    fn unanswered_send(&self) -> crate::support::error::Error {
        let detail = format!(
            "no reply from the server within {} ms",
            self.send_bound().as_millis()
        );
        crate::support::error::Error::connection(format!(
            "Redis transport failed during \"send\": {detail} (the message may have been stored; not sent again)"
        ))
        .caused_by(crate::support::error::Cause::timed_out(detail))
    }

    fn list(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(async move {
            let mut conn = self.conn("list").await?;
            let reply: Value = redis::cmd("XRANGE")
                .arg(&self.config.stream)
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(limit)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.err("list", &e))?;
            Ok(complete(parse_entries(&reply)))
        })
    }

    fn find(&self, id: String) -> BoxFuture<'_, Result<Option<StoredMessage>>> {
        Box::pin(async move {
            if !is_stream_id(&id) {
                return Ok(None);
            }
            let mut conn = self.conn("find").await?;
            let reply: Value = redis::cmd("XRANGE")
                .arg(&self.config.stream)
                .arg(&id)
                .arg(&id)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.err("find", &e))?;
            Ok(complete(parse_entries(&reply)).into_iter().next())
        })
    }

    /// Entries waiting for a consumer (not delivered to the group, or pending but claimable
    /// again) plus delayed ones.
    fn count(&self) -> BoxFuture<'_, Result<i64>> {
        Box::pin(async move {
            let mut conn = self.conn("count").await?;
            let (length, delayed): (i64, i64) = redis::pipe()
                .cmd("XLEN")
                .arg(&self.config.stream)
                .cmd("ZCARD")
                .arg(&self.config.delay_key)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.err("count", &e))?;
            // Pending entries idle for claimIdleMs or more (a dead consumer's, or handed back
            // by a finished get()) are claimable again: they count as waiting.
            let summary: redis::RedisResult<Value> = redis::cmd("XPENDING")
                .arg(&self.config.stream)
                .arg(&self.config.group)
                .query_async(&mut conn)
                .await;
            let pending = match summary {
                Ok(Value::Array(items)) => items.first().and_then(as_i64).unwrap_or(0),
                Ok(_) => 0,
                Err(e) if classify(&e) == ErrorKind::NotFound => 0,
                Err(e) => return Err(self.err("count", &e)),
            };
            let claimable = if pending > 0 {
                let stale: Value = redis::cmd("XPENDING")
                    .arg(&self.config.stream)
                    .arg(&self.config.group)
                    .arg("IDLE")
                    .arg(self.config.claim_idle.as_millis() as u64)
                    .arg("-")
                    .arg("+")
                    .arg(pending)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| self.err("count", &e))?;
                match stale {
                    Value::Array(items) => items.len() as i64,
                    _ => 0,
                }
            } else {
                0
            };
            let pending = pending - claimable;
            Ok((length - pending).max(0) + delayed)
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            *self.blocking.lock().await = None;
            if TARGETS.leave(&self.shared.key, &self.shared) {
                *self.shared.commands.lock().await = None;
            }
        })
    }
}
