//! The idle consumers of one single-node deployment (`RedisShared`) share one blocking read:
//! a connection of its own running `XREAD BLOCK … STREAMS s1 … sN id1 … idN` over the streams
//! that have idle consumers, as a wake-up only (it reads, it claims nothing: no group state
//! changes). Entries on stream s wake s's signal, so its consumers claim as after any wake-up.
//! Beside it, one poll per `pollIntervalMs` (`poll`: `scripts/idle_due.lua`, on the command
//! connection) finds delayed members that came due and stalled pending entries, which no new
//! entry announces. An idle consumer thus runs no command of its own while nothing happens.
//! Invariant: a consumer registers the stream's last id as read before its empty claim, so
//! an entry added after the claim is above it and wakes it; the read's id for a stream is the
//! lowest registered, raised only past entries whose wake-up it has given. A stream whose
//! consumer was woken to claim stays in the read for a while (`LINGER`), so the consumer's
//! return costs no re-plan; one whose consumer stopped waiting leaves at once. On a cluster,
//! where a read over many streams cannot span slots, the nodes' key tracking takes the read's
//! place (`tracking`, its nodes' connections in `node_link`), and the poll runs one script
//! per slot.

mod node_link;
mod poll;
mod slot_owners;
mod tracking;

use super::blocked::{open_blocked_read, unblock_read, READ_MARGIN};
use super::connection::{Conn, SingleNode, Target};
use super::replies::{read_reply_tops, StreamId};
use crate::queue::wake::WakeSignal;
use crate::support::locks::Locked;
use redis::aio::MultiplexedConnection;
use redis::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The shared read's BLOCK time: it is issued again this often while nothing happens (a
/// silent peer is found within it and `READ_MARGIN`).
const READ_BLOCK: Duration = Duration::from_secs(5);

/// Changes to the set of streams are gathered this long before the read is re-planned.
const REPLAN_PAUSE: Duration = Duration::from_millis(5);

/// A stream whose last idle consumer left stays in the read this long: the usual leave is a
/// consumer woken to claim, back within milliseconds, and each change of the set of streams
/// costs the read a `CLIENT UNBLOCK` and a new `XREAD` over every stream.
const LINGER: Duration = Duration::from_secs(2);

/// Most entries of one stream a read returns: only the last one's id is used.
const READ_COUNT: u32 = 16;

/// First pause after the read's connection failed; doubled on each failure, up to the most.
const RECONNECT_FIRST: Duration = Duration::from_millis(100);
const RECONNECT_MOST: Duration = Duration::from_secs(2);

/// The longest an idle consumer waits without a wake-up before it claims again, in case a
/// wake-up was missed (a stream deleted and re-made with lower ids, say); the shared read and
/// poll make it otherwise unneeded.
pub(super) const IDLE_CAP: Duration = Duration::from_secs(60);

/// What an idle consumer waits for.
pub(super) struct Watched {
    pub(super) stream: String,
    pub(super) signal: Arc<WakeSignal>,
    pub(super) delay_key: String,
    pub(super) group: String,
    pub(super) claim_idle: Duration,
    /// When the consumer's next reclaim pass is due (the poll looks for stalled entries from
    /// then on, each `reclaim_period`).
    pub(super) reclaim_at: Instant,
    pub(super) reclaim_period: Duration,
    pub(super) poll: Duration,
    /// Whether the consumer's last claim saw delayed members (it then waits for the first).
    pub(super) knows_delayed: bool,
}

/// The streams the read covers: where it reads after, and how many idle consumers wait.
struct Covered {
    after: StreamId,
    signal: Arc<WakeSignal>,
    delay_key: String,
    /// Whether the last consumer to register knew of delayed members (the tracking wakes it
    /// for members its claim did not see).
    delayed_known: bool,
    users: usize,
    /// When its last idle consumer left (it lingers, see `LINGER`).
    left_at: Option<Instant>,
}

#[derive(Default)]
struct State {
    next_key: u64,
    watched: HashMap<u64, Watched>,
    streams: HashMap<String, Covered>,
    /// Moves on every registration and leave.
    changes: u64,
    started: bool,
    /// A cluster's key tracking, not a shared read, wakes the idle consumers.
    tracking: bool,
}

/// The shared read and poll of one deployment; `RedisShared` owns it and closes it.
#[derive(Default)]
pub(super) struct IdleRead {
    state: Mutex<State>,
    /// Moves whenever the set of streams or an id changes (the read re-plans) or the first
    /// consumer registers (the poll starts).
    plan: WakeSignal,
    closing: CancellationToken,
    /// Polls run so far (`stats().sharedPolls`).
    polls: AtomicU64,
}

/// An idle consumer's place in the shared read; dropping it leaves (a wait that ends, is
/// cancelled or whose future is dropped).
pub(super) struct Registration {
    read: Arc<IdleRead>,
    key: u64,
    /// Left as a consumer woken to claim (see `leave_to_claim`).
    to_claim: bool,
}

impl Registration {
    /// Leaves as a consumer woken to claim: its stream stays in the read for `LINGER`, so
    /// that its return to the wait a few milliseconds later changes nothing.
    pub(super) fn leave_to_claim(mut self) {
        self.to_claim = true;
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.read.leave(self.key, self.to_claim);
    }
}

/// What the read's tasks connect with, handed over when the first consumer registers.
pub(super) struct Connect {
    pub(super) target: Target,
    pub(super) commands: Conn,
    pub(super) timeout: Duration,
}

impl IdleRead {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.locked()
    }

    /// Registers an idle consumer whose claim saw `top` as the stream's last id.
    pub(super) fn register(
        self: &Arc<Self>,
        watched: Watched,
        top: StreamId,
        connect: impl FnOnce() -> Connect,
    ) -> Registration {
        let mut state = self.state();
        let key = state.next_key;
        state.next_key += 1;
        let mut replan = state.watched.is_empty();
        let tracking = state.tracking;
        match state.streams.get_mut(&watched.stream) {
            Some(covered) => {
                // A cluster's tracking reads the keys again once a consumer is back (the
                // shared read of a single node needs no re-plan for it).
                replan |= covered.users == 0 && tracking;
                covered.users += 1;
                covered.delayed_known = watched.knows_delayed;
                covered.left_at = None;
                // An empty stream (`0-0`: its consumer acked and deleted what it had) says
                // only that nothing is left; the read's own id, raised past entries that
                // existed, is still below anything added later.
                if top < covered.after && top != StreamId(0, 0) {
                    covered.after = top;
                    replan = true;
                }
            }
            None => {
                state.streams.insert(
                    watched.stream.clone(),
                    Covered {
                        after: top,
                        signal: watched.signal.clone(),
                        delay_key: watched.delay_key.clone(),
                        delayed_known: watched.knows_delayed,
                        users: 1,
                        left_at: None,
                    },
                );
                replan = true;
            }
        }
        state.watched.insert(key, watched);
        state.changes += 1;
        if !state.started && !self.closing.is_cancelled() {
            state.started = true;
            let Connect {
                target,
                commands,
                timeout,
            } = connect();
            let cluster = matches!(target, Target::Cluster(_));
            state.tracking = cluster;
            match (target.single_node(), target) {
                (Some(node), _) => {
                    tokio::spawn(self.clone().read_loop(node, commands.clone(), timeout));
                }
                (None, Target::Cluster(nodes)) => {
                    tokio::spawn(self.clone().track_loop(*nodes, commands.clone(), timeout));
                }
                (None, _) => {}
            }
            tokio::spawn(self.clone().poll_loop(commands, cluster));
        }
        drop(state);
        if replan {
            self.plan.wake();
        }
        Registration {
            read: self.clone(),
            key,
            to_claim: false,
        }
    }

    /// A consumer leaves; the stream with it if no other consumer waits on it, at once or,
    /// with `linger`, once it has had none for `LINGER`.
    fn leave(&self, key: u64, linger: bool) {
        let mut state = self.state();
        let Some(watched) = state.watched.remove(&key) else {
            return;
        };
        state.changes += 1;
        let Some(covered) = state.streams.get_mut(&watched.stream) else {
            return;
        };
        covered.users -= 1;
        if covered.users > 0 {
            return;
        }
        if linger {
            covered.left_at = Some(Instant::now());
        } else {
            state.streams.remove(&watched.stream);
            drop(state);
            self.plan.wake();
        }
    }

    /// Drops the streams that lingered past `LINGER` with no idle consumer.
    fn prune(&self) {
        self.state()
            .streams
            .retain(|_, c| c.left_at.is_none_or(|left| left.elapsed() < LINGER));
    }

    /// Polls this deployment ran for its idle consumers.
    pub(super) fn polls(&self) -> u64 {
        self.polls.load(Ordering::Relaxed)
    }

    /// Ends the read and the poll (the deployment's last queue closed).
    pub(super) fn close(&self) {
        self.closing.cancel();
        self.plan.wake();
    }

    /// Every registered consumer claims again (the read failed: it may have missed entries).
    fn wake_all(&self) {
        for covered in self.state().streams.values() {
            covered.signal.wake();
        }
    }

    fn planned(&self) -> BTreeMap<String, StreamId> {
        self.prune();
        self.state()
            .streams
            .iter()
            .map(|(stream, covered)| (stream.clone(), covered.after))
            .collect()
    }

    /// The read in flight must be ended: a stream came or left, or an id went down. A
    /// consumer that leaves and registers again within `REPLAN_PAUSE` (the usual claim after
    /// a wake-up that found nothing more) costs no re-plan.
    fn outdated(&self, reading: &BTreeMap<String, StreamId>) -> bool {
        let state = self.state();
        state.streams.len() != reading.len()
            || state.streams.iter().any(|(stream, covered)| {
                reading
                    .get(stream)
                    .is_none_or(|after| covered.after < *after)
            })
    }

    /// Wakes the streams a read returned entries of and raises their ids past them.
    fn woken_by(&self, reply: &Value) {
        let mut state = self.state();
        for (stream, top) in read_reply_tops(reply) {
            if let Some(covered) = state.streams.get_mut(&stream) {
                covered.after = covered.after.max(top);
                covered.signal.wake();
            }
        }
    }

    async fn read_loop(self: Arc<Self>, node: SingleNode, commands: Conn, timeout: Duration) {
        let mut open: Option<(MultiplexedConnection, Option<i64>)> = None;
        let mut pause = RECONNECT_FIRST;
        loop {
            let seen = self.plan.seq();
            if self.closing.is_cancelled() {
                return;
            }
            if self.state().streams.is_empty() {
                self.plan.changed(seen).await;
                continue;
            }
            let (mut conn, client_id) = match open.take() {
                Some(open) => open,
                None => {
                    let opened = tokio::select! {
                        opened = open_blocked_read(&node, timeout) => opened,
                        _ = self.closing.cancelled() => return,
                    };
                    match opened {
                        Ok(opened) => opened,
                        Err(_) => {
                            self.failed(&mut pause).await;
                            continue;
                        }
                    }
                }
            };
            // As of now, not of before the connection opened (it may have taken a while).
            let seen = self.plan.seq();
            let reading = self.planned();
            if reading.is_empty() {
                open = Some((conn, client_id));
                continue;
            }
            let mut read = redis::cmd("XREAD");
            read.arg("COUNT")
                .arg(READ_COUNT)
                .arg("BLOCK")
                .arg(READ_BLOCK.as_millis() as u64)
                .arg("STREAMS");
            for stream in reading.keys() {
                read.arg(stream);
            }
            for after in reading.values() {
                read.arg(after.to_string());
            }
            let deadline = tokio::time::Instant::now() + READ_BLOCK + READ_MARGIN;
            let reply = {
                let pending = read.query_async::<Value>(&mut conn);
                tokio::pin!(pending);
                let mut seen = seen;
                loop {
                    tokio::select! {
                        // First: the read goes out before any re-plan would end it.
                        biased;
                        reply = &mut pending => break Some(reply),
                        _ = self.plan.changed(seen) => {
                            tokio::time::sleep(REPLAN_PAUSE).await;
                            seen = self.plan.seq();
                            if self.closing.is_cancelled() {
                                return;
                            }
                            if self.outdated(&reading) {
                                break Some(unblock_read(Some(commands.clone()), client_id, &mut pending).await);
                            }
                        }
                        // A silent peer: the connection is dropped below.
                        _ = tokio::time::sleep_until(deadline) => break None,
                    }
                }
            };
            match reply {
                Some(Ok(reply)) => {
                    pause = RECONNECT_FIRST;
                    open = Some((conn, client_id));
                    self.woken_by(&reply);
                }
                // A stream key went away under the read: read again over what is left.
                Some(Err(e)) if e.code() == Some("UNBLOCKED") => {
                    open = Some((conn, client_id));
                }
                Some(Err(e)) => {
                    node.heard(&e);
                    self.failed(&mut pause).await;
                }
                None => self.failed(&mut pause).await,
            }
        }
    }

    /// The read's connection failed or could not be made: every idle consumer claims (and
    /// meets the failure, which it rides out), and the read tries again after a pause.
    async fn failed(&self, pause: &mut Duration) {
        self.wake_all();
        tokio::select! {
            _ = tokio::time::sleep(*pause) => {}
            _ = self.closing.cancelled() => {}
        }
        *pause = (*pause * 2).min(RECONNECT_MOST);
    }
}
