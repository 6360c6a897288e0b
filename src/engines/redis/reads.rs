//! Reads from a stream for one consumer: a claim (our own pending entries after an abandoned
//! block, a periodic XAUTOCLAIM pass, promotion of due delayed members, then new entries), the
//! renewal and release of claimed entries (XCLAIM); the idle wait is in `idle_waits`.
//! Invariant: an entry a read takes into our pending list reaches the queue's buffer (a
//! blocking read hands it over in its wait's outcome, never keeps it), or stays pending
//! where our next claim (after an abandoned block) or any consumer's XAUTOCLAIM finds it;
//! foreign entries (no `body`/`headers`) are removed, so they never loop.

use super::connection::Conn;
use super::delivered::Delivered;
use super::read_budget::ReadSlot;
use super::replies::{
    as_i64, as_string, last_id, parse_autoclaim_reply, parse_read_reply, read_reply_page, Entry,
    StreamId,
};
use super::stream::Stream;
use crate::queue::engine::{ClaimToken, StoredMessage};
use crate::support::error::Result;
use crate::support::locks::Locked;
use redis::aio::MultiplexedConnection;
use redis::{Script, Value};
use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

/// Most delayed members one promotion moves to the stream.
const PROMOTE_LIMIT: u32 = 100;
static PROMOTE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/promote.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/renew.lua")));

/// Most of our own pending entries one re-read returns (at least: a claim's own size when
/// larger). A re-read goes on from where the last one stopped while its pages come back full,
/// so entries past the first page are not hidden until the claim idle time.
const RECOVER_PAGE: u32 = 128;

/// The reading side of one consumer: its claims, what it holds, and its own blocking read.
pub(super) struct Reader {
    pub(super) stream: Arc<Stream>,
    /// This consumer's connection for blocking reads (single node only), and its `CLIENT ID`
    /// (so a block can be ended early with `CLIENT UNBLOCK` instead of dropping the connection).
    pub(super) blocking: tokio::sync::Mutex<Option<(MultiplexedConnection, Option<i64>)>>,
    /// This consumer's share of the deployment's own reads, while it keeps one.
    pub(super) read_slot: Mutex<Option<ReadSlot>>,
    /// The stream's last id as read just before the last claim's read of new entries (single
    /// node): what an idle wait after an empty claim registers with the shared read.
    pub(super) top: Mutex<Option<StreamId>>,
    /// Entries of our pending list the queue holds (skipped when re-reading it).
    delivered: Mutex<Delivered>,
    /// Where the next claim re-reads our own pending entries from: `0` after a read whose
    /// reply may have been lost (entries it took sit in our PEL), the last id re-read while a
    /// re-read still finds full pages; `None` when there is nothing to re-read.
    recover_from: Mutex<Option<String>>,
    pub(super) reclaim: Mutex<Reclaim>,
}

/// XAUTOCLAIM bookkeeping: run every `claimIdleMs / 2` (not on every read), cursor kept.
pub(super) struct Reclaim {
    pub(super) cursor: String,
    pub(super) next_at: Instant,
}

impl Reader {
    pub(super) fn new(stream: Arc<Stream>) -> Self {
        Self {
            stream,
            blocking: tokio::sync::Mutex::new(None),
            read_slot: Mutex::new(None),
            top: Mutex::new(None),
            delivered: Mutex::default(),
            recover_from: Mutex::new(None),
            reclaim: Mutex::new(Reclaim {
                cursor: "0-0".to_owned(),
                next_at: Instant::now(),
            }),
        }
    }

    /// Turns stream entries into messages; entries without `body`/`headers` (foreign) are
    /// acknowledged and deleted, so they never loop.
    pub(super) async fn accept_entries(&self, entries: Vec<Entry>) -> Result<Vec<StoredMessage>> {
        let mut messages = Vec::with_capacity(entries.len());
        let mut foreign = Vec::new();
        for entry in entries {
            match (entry.body, entry.headers) {
                // Fenced by the group's pending owner: the token only marks it as ours.
                (Some(body), Some(headers)) => messages.push(StoredMessage {
                    id: entry.id,
                    body,
                    headers,
                    token: Some(ClaimToken::PendingOwner),
                }),
                _ => foreign.push(entry.id),
            }
        }
        if !foreign.is_empty() {
            self.stream.ack_and_delete(foreign, "discard").await?;
        }
        self.delivered()
            .hold(messages.iter().map(|m| m.id.clone()), Instant::now());
        self.note_tracked();
        Ok(messages)
    }

    /// `XREADGROUP` of up to `limit` entries after `from` (`>`: new ones; `0`: our own
    /// pending ones), blocking for `block` if given.
    pub(super) fn read_group(&self, limit: u32, block: Option<Duration>, from: &str) -> redis::Cmd {
        let mut read = redis::cmd("XREADGROUP");
        read.arg("GROUP")
            .arg(&self.stream.config.group)
            .arg(&self.stream.config.consumer)
            .arg("COUNT")
            .arg(limit);
        if let Some(block) = block {
            read.arg("BLOCK").arg(block.as_millis().max(1) as u64);
        }
        read.arg("STREAMS")
            .arg(&self.stream.config.stream)
            .arg(from);
        read
    }

    /// One claim. A claim that failed may have taken entries into our pending list without
    /// its reply reaching us (a connection lost after the server ran it): the next claim
    /// re-reads our own pending entries first, so they are not hidden until the claim idle.
    pub(super) async fn claim_once(&self, limit: u32) -> Result<Vec<StoredMessage>> {
        let claimed = self.claim_from_server(limit).await;
        if claimed.is_err() {
            self.lost_a_read();
        }
        claimed
    }

    /// A read's reply may have been lost after the server ran it: the next claim re-reads our
    /// pending list from its start (also when a re-read was under way: it may have missed them).
    /// No idle wait follows before that claim: the wait would register the lost read's last
    /// id, and nothing newer might come for long.
    pub(super) fn lost_a_read(&self) {
        *self.recover_from.locked() = Some("0".to_owned());
        *self.top.locked() = None;
    }

    /// A re-read found a full page: the next claim goes on after `last`, unless a read was
    /// lost meanwhile (which starts it over from the beginning).
    fn recover_after(&self, last: String) {
        self.recover_from.locked().get_or_insert(last);
    }

    async fn claim_from_server(&self, limit: u32) -> Result<Vec<StoredMessage>> {
        let mut conn = self.stream.conn("read").await?;
        let mut entries = Vec::new();
        // What we hold, as of before the reads: an entry acked (and forgotten) while a read
        // was under way may be in its reply, and must still be skipped.
        let recovering = self.recover_from.locked().take();
        let reclaiming = self.reclaim_due();
        let delivered = if recovering.is_some() || reclaiming {
            let held = self
                .delivered()
                .still_held(Instant::now(), self.stream.config.claim_idle);
            self.note_tracked();
            held
        } else {
            HashSet::new()
        };
        if let Some(from) = recovering {
            let page = limit.max(RECOVER_PAGE);
            let reply: Value = self
                .read_group(page, None, &from)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.stream.err("read", &e))?;
            if let (read, Some(last)) = read_reply_page(&reply) {
                if read >= page as usize {
                    self.recover_after(last);
                }
            }
            entries.extend(
                parse_read_reply(reply)
                    .into_iter()
                    .filter(|e| !delivered.contains(&e.id)),
            );
        }
        if reclaiming {
            entries.extend(self.reclaim(&mut conn, limit, &delivered).await?);
        }
        let reply = self.promote_and_read(&mut conn, limit).await?;
        entries.extend(parse_read_reply(reply));
        self.accept_entries(entries).await
    }

    /// Promotion of due delayed members, then XREADGROUP of new entries, with the stream's
    /// last id read between them, in one round trip (the claim after a wake-up is that much
    /// sooner): an idle wait after a claim that found nothing registers it with the shared
    /// read (`idle_read`), and any entry added after the claim has a higher id (one added
    /// between the two commands only wakes the consumer once for nothing). The three keys
    /// share a slot, so a cluster sends them to one node.
    async fn promote_and_read(&self, conn: &mut Conn, limit: u32) -> Result<Value> {
        let cluster = self.stream.config.connect.cluster;
        let read = self.read_group(limit, None, ">");
        let mut top = redis::cmd("XREVRANGE");
        top.arg(&self.stream.config.stream)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1);
        let mut promote = redis::cmd("EVALSHA");
        promote
            .arg(PROMOTE.get_hash())
            .arg(2)
            .arg(&self.stream.config.delay_key)
            .arg(&self.stream.config.stream)
            .arg(PROMOTE_LIMIT);
        let mut pipe = redis::pipe();
        pipe.add_command(promote).add_command(top).add_command(read);
        // On a cluster the pipeline fails as a whole on an error, so that the cluster client
        // follows a redirect (`MOVED`, `ASK`) with all three.
        if !cluster {
            pipe.ignore_errors();
        }
        let replies: Vec<Value> = match pipe.query_async(conn).await {
            Ok(replies) => replies,
            // The node has no script yet: loaded and run now. The read ran all the same, and
            // what it took is re-read by the next claim.
            Err(e)
                if cluster
                    && e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                self.lost_a_read();
                let promoted = self
                    .promote(conn)
                    .await
                    .map_err(|e| self.stream.err("drainDelayed", &e))?;
                self.note_next_due(&promoted);
                return Ok(Value::Nil);
            }
            Err(e) => return Err(self.stream.err("drainDelayed", &e)),
        };
        let mut replies = replies.into_iter();
        let (promoted, top, read) = (replies.next(), replies.next(), replies.next());
        match promoted.unwrap_or(Value::Nil).extract_error() {
            Ok(promoted) => self.note_next_due(&promoted),
            // Not loaded on this server yet: loaded and run now. What it adds is above the
            // last id read, so an idle wait registered with it is woken for it.
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                match self.promote(conn).await {
                    Ok(promoted) => self.note_next_due(&promoted),
                    Err(e) => {
                        // The read ran: what it took is re-read by the next claim.
                        self.lost_a_read();
                        return Err(self.stream.err("drainDelayed", &e));
                    }
                }
            }
            Err(e) => {
                self.lost_a_read();
                return Err(self.stream.err("drainDelayed", &e));
            }
        }
        let reply = read
            .unwrap_or(Value::Nil)
            .extract_error()
            .map_err(|e| self.stream.err("read", &e))?;
        *self.top.locked() = top.and_then(|t| last_id(&t));
        Ok(reply)
    }

    /// Moves up to `PROMOTE_LIMIT` due delayed members into the stream (loading the script
    /// if the server does not have it).
    async fn promote(&self, conn: &mut Conn) -> redis::RedisResult<Value> {
        PROMOTE
            .key(&self.stream.config.delay_key)
            .key(&self.stream.config.stream)
            .arg(PROMOTE_LIMIT)
            .invoke_async(conn)
            .await
    }

    fn delivered(&self) -> std::sync::MutexGuard<'_, Delivered> {
        self.delivered.locked()
    }

    /// These entries are settled or given back: no longer ours to skip when re-reading.
    pub(super) fn forget_delivered(&self, ids: &[String]) {
        self.delivered().forget(ids);
        self.note_tracked();
    }

    /// The queue still holds these entries (see `Delivered`).
    pub(super) fn name_delivered(&self, ids: &[String]) {
        self.delivered().name(ids, Instant::now());
    }

    /// Shows how many entries are kept as held in `stats()`.
    fn note_tracked(&self) {
        if let Some(counters) = self.stream.counters.get() {
            counters.track_ids(self.delivered().len());
        }
    }

    /// `XCLAIM … JUSTID` of our own entries: resets their idle time (renewing our claim), or
    /// sets it to `idle` (handing them to whoever runs XAUTOCLAIM next).
    /// Sets the idle time of the entries of `ids` still pending for this consumer to `idle`
    /// (zero renews the claim; the claim threshold hands them to the next XAUTOCLAIM);
    /// returns those ids. Entries another consumer took over are left alone.
    pub(super) async fn renew_own(
        &self,
        ids: &[String],
        idle: Duration,
        op: &str,
    ) -> Result<Vec<String>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.stream.conn(op).await?;
        let reply: Value = RENEW
            .key(&self.stream.config.stream)
            .arg(&self.stream.config.group)
            .arg(&self.stream.config.consumer)
            .arg(idle.as_millis() as u64)
            .arg(ids)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.stream.err(op, &e))?;
        Ok(match reply {
            Value::Array(items) => items.iter().filter_map(as_string).collect(),
            _ => Vec::new(),
        })
    }

    /// Hands `ids` back: no longer held here, their idle time set to the claim threshold,
    /// and the next claim's XAUTOCLAIM pass made at once from the start, so any consumer
    /// (this one included) takes them without waiting for the pass's period.
    pub(super) async fn release(&self, ids: &[String]) -> Result<()> {
        self.forget_delivered(ids);
        if ids.is_empty() {
            return Ok(());
        }
        self.renew_own(ids, self.stream.config.claim_idle, "release")
            .await?;
        let mut reclaim = self.reclaim.locked();
        reclaim.next_at = Instant::now();
        reclaim.cursor = "0-0".to_owned();
        Ok(())
    }

    pub(super) fn reclaim_period(&self) -> Duration {
        (self.stream.config.claim_idle / 2).clamp(Duration::from_millis(10), Duration::from_secs(5))
    }

    fn reclaim_due(&self) -> bool {
        let reclaim = self.reclaim.locked();
        Instant::now() >= reclaim.next_at
    }

    /// XAUTOCLAIM from the kept cursor; a full pass ends when the cursor comes back to 0-0.
    async fn reclaim(
        &self,
        conn: &mut Conn,
        limit: u32,
        delivered: &HashSet<String>,
    ) -> Result<Vec<Entry>> {
        let cursor = self.reclaim.locked().cursor.clone();
        let reply: Value = redis::cmd("XAUTOCLAIM")
            .arg(&self.stream.config.stream)
            .arg(&self.stream.config.group)
            .arg(&self.stream.config.consumer)
            .arg(self.stream.config.claim_idle.as_millis() as u64)
            .arg(&cursor)
            .arg("COUNT")
            .arg(limit)
            .query_async(conn)
            .await
            .map_err(|e| self.stream.err("reclaim", &e))?;
        let (next, mut entries) = parse_autoclaim_reply(reply);
        // Our own entries idle past the threshold (a renewal held up by an outage) are ours
        // already and held in our buffer or a handler: taking them again would deliver them
        // twice.
        entries.retain(|e| !delivered.contains(&e.id));
        let mut reclaim = self.reclaim.locked();
        // A pass goes on at once only while it finds work; one that found nothing resumes
        // after the period, so an idle consumer never spins through a long pending list.
        if next == "0-0" || entries.is_empty() {
            reclaim.next_at = Instant::now() + self.reclaim_period();
        }
        reclaim.cursor = next;
        Ok(entries)
    }

    fn note_next_due(&self, promoted: &Value) {
        let wait = match promoted {
            Value::Array(items) => items.get(2).and_then(as_i64),
            _ => None,
        };
        *self.stream.next_due.locked() = wait
            .filter(|ms| *ms >= 0)
            .map(|ms| Duration::from_millis(ms as u64));
    }
}
