//! The `Engine` contract for `RedisQueue`: sends (in batches, or through the direct wire
//! built here for a single node), claims and idle waits, settles, redelivery, leases, listing
//! and counting, each over the reads and writes of `reads` and `writes`.

use super::direct::RedisWire;
use super::errors::classify;
use super::replies::{as_i64, complete, is_stream_id, parse_entries};
use super::send_batch::SendBatch;
use super::stream_queue::RedisQueue;
use crate::queue::engine::{DirectWire, Engine, Held, NewMessage, StoredMessage, WaitOutcome};
use crate::queue::stats::Counters;
use crate::queue::wake::WakeSignal;
use crate::support::error::{ErrorKind, Result};
use futures_util::future::BoxFuture;
use redis::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One consumer in an idle wait, counted among its deployment's for as long as it waits.
struct IdleConsumer<'a> {
    count: &'a AtomicUsize,
    /// How many were waiting, this one included, when it began.
    among: usize,
}

impl<'a> IdleConsumer<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        let among = count.fetch_add(1, Ordering::AcqRel) + 1;
        Self { count, among }
    }
}

impl Drop for IdleConsumer<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Engine for RedisQueue {
    fn attach_counters(&self, counters: Arc<Counters>) {
        let _ = self.stream.counters.set(counters);
    }

    fn wake_signal(&self) -> Arc<WakeSignal> {
        self.stream.wake.clone()
    }

    /// The polls of the deployment's idle consumers that share its read (single node).
    fn shared_polls(&self) -> u64 {
        self.stream.shared.idle.polls()
    }

    /// Creates the consumer group from the stream's start (`0`, so entries sent before it
    /// existed are delivered), creating the stream if needed; an existing group is fine.
    fn setup(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let mut conn = self.stream.conn("ensureGroup").await?;
            let created: redis::RedisResult<Value> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&self.stream.config.stream)
                .arg(&self.stream.config.group)
                .arg("0")
                .arg("MKSTREAM")
                .query_async(&mut conn)
                .await;
            match created {
                Ok(_) => Ok(()),
                Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
                Err(e) => Err(self.stream.err("ensureGroup", &e)),
            }
        })
    }

    fn insert(&self, messages: Vec<NewMessage>) -> BoxFuture<'_, Vec<Result<String>>> {
        Box::pin(async move {
            let batch = SendBatch::new(&self.writer.marker_names, &messages);
            self.writer.insert_batch(&messages, batch).await
        })
    }

    fn direct_wire(self: Arc<Self>) -> Option<Arc<dyn DirectWire>> {
        RedisWire::new(self).map(|w| Arc::new(w) as Arc<dyn DirectWire>)
    }

    fn claim(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(async move {
            // A failure is the queue's to ride out (its outage policy: capped, jittered
            // pauses that an abort ends).
            self.reader.claim_once(limit).await
        })
    }

    /// The wait is on the wake signal, which the deployment's shared read (on a cluster, its
    /// nodes' key tracking) and poll move (`idle_read`); on a single node, the first few idle
    /// consumers block on a read of their own instead, within the connection budget.
    fn idle<'a>(
        &'a self,
        seen: u64,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<WaitOutcome>> {
        Box::pin(async move {
            if cancel.is_cancelled() {
                return Ok(WaitOutcome::Cancelled);
            }
            let waited = match self.stream.shared.target.single_node() {
                None => self.reader.wait_shared(seen, cancel).await,
                Some(node) => {
                    let idle = IdleConsumer::enter(&self.stream.shared.idle_consumers);
                    if idle.among <= self.stream.shared.reads.own_reads()
                        && self.reader.keep_own_read()
                    {
                        self.reader.block_once(&node, cancel, 64).await
                    } else {
                        // Its own read is not kept while it shares.
                        self.reader.drop_own_read().await;
                        self.reader.wait_shared(seen, cancel).await
                    }
                }
            };
            waited
        })
    }

    fn delete(&self, held: Vec<Held>) -> BoxFuture<'_, Result<u64>> {
        Box::pin(async move {
            // Forgotten once written: until then a re-read of our own pending entries (after a
            // failed claim) must still skip them, or an ack waiting out an outage would see its
            // message delivered again. Each attempt names them as still held.
            let ids: Vec<String> = held.iter().map(|h| h.id.clone()).collect();
            self.reader.name_delivered(&ids);
            let written = self.delete_held(held).await;
            match written {
                Ok(_) => self.reader.forget_delivered(&ids),
                Err(_) => self.reader.name_delivered(&ids),
            }
            written
        })
    }

    fn redeliver(&self, held: Held, copy: NewMessage) -> BoxFuture<'_, Result<Option<String>>> {
        Box::pin(async move {
            self.reader.forget_delivered(std::slice::from_ref(&held.id));
            if !is_stream_id(&held.id) {
                return Ok(None);
            }
            self.stream
                .with_reconnect(|| self.writer.redeliver_once(&held.id, &copy))
                .await
        })
    }

    /// Entries claimed into our buffer but never handed out: their idle time is set to the
    /// claim threshold so any consumer's next XAUTOCLAIM takes them at once (ours included).
    fn release(&self, held: Vec<Held>) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let ids: Vec<String> = held.into_iter().map(|h| h.id).collect();
            self.reader.release(&ids).await
        })
    }

    fn keep_claimed(&self, held: Vec<Held>) -> BoxFuture<'_, Result<Vec<Held>>> {
        Box::pin(async move {
            let ids: Vec<String> = held.iter().map(|h| h.id.clone()).collect();
            // Held by the queue whatever the answer: named before and after (an answer can
            // take up to the connect timeout).
            self.reader.name_delivered(&ids);
            let renewed = self.reader.renew_own(&ids, Duration::ZERO, "reclaim").await;
            self.reader.name_delivered(&ids);
            let renewed: std::collections::HashSet<String> = renewed?.into_iter().collect();
            // Not ours any more (another consumer took them over, or they were settled): the
            // queue drops them, and nothing of ours is left to skip.
            let lost: Vec<String> = ids.into_iter().filter(|id| !renewed.contains(id)).collect();
            self.reader.forget_delivered(&lost);
            Ok(held
                .into_iter()
                .filter(|h| renewed.contains(&h.id))
                .collect())
        })
    }

    fn claim_lease(&self) -> Duration {
        self.stream.config.claim_idle
    }

    /// Getting the command connection, then the pipeline: each within the connect timeout;
    /// with `waitForReplicas`, the `WAIT` too.
    fn send_bound(&self) -> Duration {
        let steps = if self.stream.config.wait_for_replicas > 0 {
            3
        } else {
            2
        };
        self.stream.shared.connect_timeout * steps + Duration::from_secs(1)
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
        .with_outcome(crate::support::error::Outcome::Unknown)
    }

    fn list(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(self.entries("list", ("-", "+"), Some(limit)))
    }

    fn find(&self, id: String) -> BoxFuture<'_, Result<Option<StoredMessage>>> {
        Box::pin(async move {
            if !is_stream_id(&id) {
                return Ok(None);
            }
            let found = self.entries("find", (&id, &id), None).await?;
            Ok(found.into_iter().next())
        })
    }

    /// Entries waiting for a consumer (not delivered to the group, or pending but claimable
    /// again) plus delayed ones.
    fn count(&self) -> BoxFuture<'_, Result<i64>> {
        Box::pin(async move {
            let mut conn = self.stream.conn("count").await?;
            let (length, delayed): (i64, i64) = redis::pipe()
                .cmd("XLEN")
                .arg(&self.stream.config.stream)
                .cmd("ZCARD")
                .arg(&self.stream.config.delay_key)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.stream.err("count", &e))?;
            // Pending entries idle for claimIdleMs or more (a dead consumer's, or handed back
            // by a finished get()) are claimable again: they count as waiting.
            let summary: redis::RedisResult<Value> = redis::cmd("XPENDING")
                .arg(&self.stream.config.stream)
                .arg(&self.stream.config.group)
                .query_async(&mut conn)
                .await;
            let pending = match summary {
                Ok(Value::Array(items)) => items.first().and_then(as_i64).unwrap_or(0),
                Ok(_) => 0,
                Err(e) if classify(&e) == ErrorKind::NotFound => 0,
                Err(e) => return Err(self.stream.err("count", &e)),
            };
            let claimable = if pending > 0 {
                let stale: Value = redis::cmd("XPENDING")
                    .arg(&self.stream.config.stream)
                    .arg(&self.stream.config.group)
                    .arg("IDLE")
                    .arg(self.stream.config.claim_idle.as_millis() as u64)
                    .arg("-")
                    .arg("+")
                    .arg(pending)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| self.stream.err("count", &e))?;
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
            self.reader.drop_own_read().await;
            self.leave_shared().await;
        })
    }
}

impl RedisQueue {
    /// The stream's complete entries from `start` to `end` (`XRANGE`, at most `count`), for
    /// operation `op`.
    async fn entries(
        &self,
        op: &str,
        (start, end): (&str, &str),
        count: Option<u32>,
    ) -> Result<Vec<StoredMessage>> {
        let mut conn = self.stream.conn(op).await?;
        let mut xrange = redis::cmd("XRANGE");
        xrange.arg(&self.stream.config.stream).arg(start).arg(end);
        if let Some(count) = count {
            xrange.arg("COUNT").arg(count);
        }
        let reply: Value = xrange
            .query_async(&mut conn)
            .await
            .map_err(|e| self.stream.err(op, &e))?;
        Ok(complete(parse_entries(&reply)))
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
            self.stream
                .with_reconnect(|| self.stream.ack_and_delete(by_id.clone(), "ack"))
                .await?;
        }
        if fenced.is_empty() {
            return Ok(0);
        }
        let fenced: Vec<String> = fenced.into_iter().map(|h| h.id).collect();
        let settled = self
            .stream
            .with_reconnect(|| self.writer.settle_own(&fenced, "ack"))
            .await?;
        Ok((fenced.len() as u64).saturating_sub(settled))
    }
}
