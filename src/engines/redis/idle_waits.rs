//! A consumer's idle wait. A few idle consumers of a single node block on a read of their own,
//! ended early with CLIENT UNBLOCK where the server allows it: the fastest wake-up, since the
//! read returns the entry itself. Past a few, and every consumer on a cluster, they wait on
//! the wake signal that the deployment's shared read or key tracking moves (`idle_read`).
//! Invariant: an entry a blocking read takes into our pending list reaches the queue's buffer
//! in the wait's outcome, never kept here.

use super::blocked::{open_blocked_read, unblock_read, READ_MARGIN};
use super::connection::SingleNode;
use super::idle_read::{Connect, Watched, IDLE_CAP};
use super::reads::Reader;
use super::replies::parse_read_reply;
use crate::queue::engine::WaitOutcome;
use crate::queue::wake::WaitEnd;
use crate::support::error::Result;
use crate::support::locks::Locked;
use redis::aio::MultiplexedConnection;
use redis::Value;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

impl Reader {
    /// Blocks on our own connection until an entry arrives, a delayed member is due, the
    /// next reclaim pass is due or the poll interval passes (so members delayed by other
    /// processes are promoted in time), or `cancel` fires.
    pub(super) async fn block_once(
        &self,
        node: &SingleNode,
        cancel: &CancellationToken,
        limit: u32,
    ) -> Result<WaitOutcome> {
        let delayed_seen = self.stream.delayed_added.seq();
        let until_reclaim = {
            let reclaim = self.reclaim.locked();
            reclaim.next_at.saturating_duration_since(Instant::now())
        };
        let next_due = *self.stream.next_due.locked();
        let mut block = self.stream.config.poll_interval.min(until_reclaim);
        if let Some(due) = next_due {
            block = block.min(due);
        }
        let mut guard = self.blocking.lock().await;
        let (mut conn, client_id) = match guard.take() {
            Some(open) => open,
            None => tokio::select! {
                opened = self.open_blocking(node) => opened?,
                _ = cancel.cancelled() => return Ok(WaitOutcome::Cancelled),
            },
        };
        // Ended before the read goes out: an UNBLOCK could overtake the read (it goes over
        // another connection), find nothing blocked, and leave the read to block its full time.
        if cancel.is_cancelled() {
            *guard = Some((conn, client_id));
            return Ok(WaitOutcome::Cancelled);
        }
        // Redis times blocked reads out on its own coarse tick (100 ms at the default hz), so
        // where the block can be ended on demand, our timer ends it on time and the server's
        // timeout is only a backstop.
        let server_block = if client_id.is_some() {
            block + Duration::from_secs(1)
        } else {
            block
        };
        let read = self.read_group(limit, Some(server_block), ">");
        let (reply, cancelled) = {
            let reading = read.query_async::<Value>(&mut conn);
            tokio::pin!(reading);
            tokio::select! {
                reply = &mut reading => (Some(reply), false),
                _ = tokio::time::sleep(block), if client_id.is_some() => (Some(self.unblock(client_id, &mut reading).await), false),
                // This instance just added a delayed message that may be due before the block
                // ends: end it now so the wait is planned again around that member.
                _ = self.stream.delayed_added.changed(delayed_seen), if client_id.is_some() => (Some(self.unblock(client_id, &mut reading).await), false),
                // No way to end the block early (the server refused CLIENT ID): past its BLOCK
                // time and a margin, the connection is taken for dead (a silent peer) and
                // dropped below.
                _ = tokio::time::sleep(server_block + READ_MARGIN), if client_id.is_none() => (None, false),
                _ = cancel.cancelled() => match client_id {
                    Some(_) => (Some(self.unblock(client_id, &mut reading).await), true),
                    // No way to end the block early: the connection is dropped below.
                    None => (None, true),
                },
            }
        };
        let outcome = match reply {
            None => {
                // Entries the abandoned block may have claimed are re-read from our own
                // pending list by the next claim.
                self.lost_a_read();
                return Ok(if cancelled {
                    WaitOutcome::Cancelled
                } else {
                    WaitOutcome::TimedOut
                });
            }
            Some(Ok(reply)) => {
                *guard = Some((conn, client_id));
                drop(guard);
                let entries = parse_read_reply(reply);
                if entries.is_empty() {
                    Ok(WaitOutcome::TimedOut)
                } else {
                    match self.accept_entries(entries).await {
                        // Only foreign entries, now removed: the next claim looks again.
                        Ok(messages) if messages.is_empty() => Ok(WaitOutcome::Woken),
                        Ok(messages) => Ok(WaitOutcome::Claimed(messages)),
                        // The discard of foreign entries failed: the read's own entries sit
                        // in our pending list, handed to nobody; the next claim re-reads it.
                        Err(err) => {
                            self.lost_a_read();
                            Err(err)
                        }
                    }
                }
            }
            // The stream key went away under the block (deleted, or its slot migrated): not an
            // error of the consumer's; the next claim finds out where things stand.
            Some(Err(e)) if e.code() == Some("UNBLOCKED") => {
                *guard = Some((conn, client_id));
                Ok(WaitOutcome::TimedOut)
            }
            Some(Err(e)) => {
                node.heard(&e);
                self.lost_a_read();
                Err(self.stream.err("read", &e))
            }
        };
        if cancelled {
            // What the block claimed goes to the queue all the same (it releases it).
            return outcome.map(|o| match o {
                WaitOutcome::Claimed(messages) => WaitOutcome::Claimed(messages),
                _ => WaitOutcome::Cancelled,
            });
        }
        outcome
    }

    /// Whether this consumer may block on a read of its own: it keeps one already, or the
    /// deployment's budget has one left (see `read_budget`). Each consumer decides anew at
    /// every wait, counted among the idle ones.
    pub(super) fn keep_own_read(&self) -> bool {
        let mut slot = self.read_slot.locked();
        if slot.is_none() {
            *slot = self.stream.shared.reads.reserve();
        }
        slot.is_some()
    }

    /// Drops this consumer's own read's connection and gives its slot back to the budget.
    pub(super) async fn drop_own_read(&self) {
        *self.blocking.lock().await = None;
        *self.read_slot.locked() = None;
    }

    async fn open_blocking(
        &self,
        node: &SingleNode,
    ) -> Result<(MultiplexedConnection, Option<i64>)> {
        open_blocked_read(node, self.stream.shared.connect_timeout)
            .await
            .map_err(|failure| match failure {
                Some(e) => self.stream.err("read", &e),
                None => self.stream.shared.no_answer("read"),
            })
    }

    /// Ends our blocked read now (`CLIENT UNBLOCK … TIMEOUT` from the command connection) and
    /// takes its reply: nil, or entries that arrived just before.
    async fn unblock<F>(
        &self,
        client_id: Option<i64>,
        reading: &mut std::pin::Pin<&mut F>,
    ) -> redis::RedisResult<Value>
    where
        F: std::future::Future<Output = redis::RedisResult<Value>>,
    {
        let commands = match client_id {
            Some(_) => self.stream.shared.conn("read").await.ok(),
            None => None,
        };
        unblock_read(commands, client_id, reading).await
    }

    /// An idle wait on the deployment's shared read (on a cluster, its key tracking):
    /// registered with it, it waits for this queue's wake signal (moved past `seen`, read
    /// before the claim that found nothing), the next delayed member this consumer knows of, a
    /// delayed add of this process (re-plans the wait), `IDLE_CAP`, or `cancel`. It runs no
    /// command and claims nothing.
    pub(super) async fn wait_shared(
        &self,
        seen: u64,
        cancel: &CancellationToken,
    ) -> Result<WaitOutcome> {
        // No last id from the claim before (it failed, or none ran): claim again.
        let Some(top) = self.top.locked().take() else {
            return Ok(WaitOutcome::Woken);
        };
        let delayed_seen = self.stream.delayed_added.seq();
        let next_due = *self.stream.next_due.locked();
        let wait = next_due.map_or(IDLE_CAP, |due| due.min(IDLE_CAP));
        let commands = self.stream.conn("read").await?;
        let reclaim_at = self.reclaim.locked().next_at;
        let watched = Watched {
            stream: self.stream.config.stream.clone(),
            signal: self.stream.wake.clone(),
            delay_key: self.stream.config.delay_key.clone(),
            group: self.stream.config.group.clone(),
            claim_idle: self.stream.config.claim_idle,
            reclaim_at,
            reclaim_period: self.reclaim_period(),
            poll: self.stream.config.poll_interval,
            knows_delayed: next_due.is_some(),
        };
        let registered = self.stream.shared.idle.register(watched, top, || Connect {
            target: self.stream.shared.target.clone(),
            commands,
            timeout: self.stream.shared.connect_timeout,
        });
        let end = tokio::select! {
            end = self.stream.wake.wait(seen, wait, cancel) => end,
            _ = self.stream.delayed_added.changed(delayed_seen) => WaitEnd::Woken,
        };
        // Cancelled (get() aborted, close): out of the read at once. Otherwise the consumer
        // claims and is most likely back in a few milliseconds.
        if end != WaitEnd::Cancelled {
            registered.leave_to_claim();
        }
        Ok(end.into())
    }
}
