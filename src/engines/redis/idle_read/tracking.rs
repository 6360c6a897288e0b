//! A cluster's idle consumers are woken by the servers' key tracking. A read over many streams
//! cannot span slots, so instead one connection per node (RESP3, `CLIENT TRACKING ON`) reads
//! each idle consumer's stream and delayed zset once (`XREVRANGE … COUNT 1`, `ZCARD`), and
//! the node then says, once, when either key changes: an entry added by any sender (ours or
//! another client's) or deleted (an ack), a delayed member added or removed, the key deleted
//! or migrated away. The stream's consumers are woken and claim; its keys are read, and so
//! tracked, again when a consumer waits once more. An idle queue thus runs no read of its own
//! while nothing happens, and a node holds one such connection whatever the number of queues.
//! Keys are read on the node that holds their slot as `CLUSTER SLOTS` last said (asked again
//! after a node is lost or a read redirected), or where a `MOVED` sends them. Each node's
//! reads run in a task of their own, so a node that does not answer holds up no other node's
//! wake-ups; pushes and read results come back to one loop as events.
//! Invariant: a stream with idle consumers is tracked, or its consumers are woken to claim
//! each `pollIntervalMs` until it is (a read under way or failed, a node lost or refusing the
//! tracking); its keys are read only after they registered, and a read that finds an entry
//! above what they registered, or delayed members their claim did not see, wakes them (added
//! before the tracking began). A change announced while a stream's read is under way makes it
//! read again: the announcement may concern the read itself, after which the node tracks the
//! key no more. A read's outcome applies only to the read its stream waits for.

use super::node_link::{ping_link, read_on_node, Armed, Event};
use super::slot_owners::SlotOwners;
use super::{IdleRead, READ_BLOCK, RECONNECT_FIRST, RECONNECT_MOST};
use crate::engines::redis::blocked::READ_MARGIN;
use crate::engines::redis::connection::{ClusterTarget, Conn};
use crate::engines::redis::replies::StreamId;
use crate::engines::redis::slot::slot;
use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::time::Instant;

/// `MOVED` replies a stream's reads follow in a row before they back off (two nodes that
/// disagree during a failover or resharding).
const MOST_REDIRECTS: u32 = 3;

/// Where a stream's keys stand with the node that holds them.
enum Arming {
    /// Not tracked (never read, or the node announced a change since).
    Untracked,
    /// Read number `read` is under way; `announced`: a change was announced meanwhile.
    Reading { read: u64, announced: bool },
    /// Tracked since a read that saw `top` as the stream's last entry.
    Tracked { top: StreamId },
    /// The read failed: tried again then.
    RetryAt(Instant),
}

struct Stream {
    /// The node its keys are read on, `host:port`.
    node: String,
    delay_key: String,
    arming: Arming,
    /// Pause before the next read after a failed one; doubled on each failure.
    pause: Duration,
    /// `MOVED` replies followed in a row.
    redirects: u32,
    /// Since when its consumers have waited untracked, or were last woken to claim as if they
    /// polled (`None` while it is tracked or has no idle consumer).
    polled: Option<Instant>,
}

/// The loop's own state.
struct Tracking {
    cluster: ClusterTarget,
    /// The command connection (`CLUSTER SLOTS` goes over it).
    commands: Conn,
    timeout: Duration,
    events: UnboundedSender<Event>,
    seed: String,
    streams: HashMap<String, Stream>,
    links: HashMap<String, MultiplexedConnection>,
    /// Nodes with reads under way (one batch per node at a time).
    reading: HashSet<String>,
    next_read: u64,
    owners: SlotOwners,
    asking_slots: bool,
}

impl IdleRead {
    /// Tracks the keys of the streams that have idle consumers on the nodes that hold them,
    /// and wakes a stream's consumers when a node announces a change (see the module doc).
    pub(super) async fn track_loop(
        self: Arc<Self>,
        cluster: ClusterTarget,
        commands: Conn,
        timeout: Duration,
    ) {
        let (events, mut inbox) = unbounded_channel::<Event>();
        let mut tracking = Tracking {
            seed: cluster.seed_address(),
            cluster,
            commands,
            timeout,
            events,
            streams: HashMap::new(),
            links: HashMap::new(),
            reading: HashSet::new(),
            next_read: 0,
            owners: SlotOwners::default(),
            asking_slots: false,
        };
        tracking.ask_slots();
        let mut check_at = Instant::now() + READ_BLOCK;
        loop {
            let seen = self.plan.seq();
            if self.closing.is_cancelled() {
                return;
            }
            let (due, next) = self.streams_to_read(&mut tracking);
            tracking.start_reads(due);
            let wake_at = next.map_or(check_at, |at| at.min(check_at));
            tokio::select! {
                event = inbox.recv() => match event {
                    Some(Event::Push(node, push)) => self.announced(&mut tracking, &node, push),
                    Some(Event::Read { node, read, conn, outcomes }) => {
                        self.read(&mut tracking, node, read, conn, outcomes)
                    }
                    Some(Event::Slots(owners)) => tracking.rehome(owners),
                    None => return,
                },
                _ = self.plan.changed(seen) => {}
                _ = tokio::time::sleep_until(wake_at) => {
                    if Instant::now() >= check_at {
                        check_at = Instant::now() + READ_BLOCK;
                        tracking.check_links();
                    }
                }
                _ = self.closing.cancelled() => return,
            }
        }
    }

    /// Brings the tracked streams in line with the streams that have idle consumers, wakes
    /// consumers that registered below what their stream's last read saw, and those of
    /// untracked streams each `pollIntervalMs`; returns the streams whose keys are to be read
    /// now, and when to look again for those that wait.
    fn streams_to_read(&self, tracking: &mut Tracking) -> (Vec<String>, Option<Instant>) {
        self.prune();
        let now = Instant::now();
        let mut state = self.state();
        let poll = state
            .watched
            .values()
            .map(|w| w.poll)
            .min()
            .unwrap_or(RECONNECT_MOST)
            .max(Duration::from_millis(1));
        tracking
            .streams
            .retain(|name, _| state.streams.contains_key(name));
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        for (name, covered) in state.streams.iter_mut() {
            if covered.users == 0 {
                if let Some(stream) = tracking.streams.get_mut(name) {
                    stream.polled = None;
                }
                continue;
            }
            let home = tracking.home(name);
            let stream = tracking
                .streams
                .entry(name.clone())
                .or_insert_with(|| Stream {
                    node: home,
                    delay_key: covered.delay_key.clone(),
                    arming: Arming::Untracked,
                    pause: RECONNECT_FIRST,
                    redirects: 0,
                    polled: None,
                });
            match stream.arming {
                Arming::Tracked { top } => {
                    stream.polled = None;
                    if covered.after < top {
                        covered.after = top;
                        covered.signal.wake();
                    }
                    continue;
                }
                Arming::Untracked => due.push(name.clone()),
                Arming::RetryAt(at) if at <= now => due.push(name.clone()),
                Arming::RetryAt(at) => next = Some(next.map_or(at, |n| n.min(at))),
                Arming::Reading { .. } => {}
            }
            let polled = *stream.polled.get_or_insert(now);
            if now >= polled + poll {
                stream.polled = Some(now);
                covered.signal.wake();
            }
            let poll_at = stream.polled.unwrap_or(now) + poll;
            next = Some(next.map_or(poll_at, |n| n.min(poll_at)));
        }
        (due, next)
    }

    /// A node's reads came back: tracked streams wake their consumers if an entry is above
    /// what they registered, or the zset has members their claim did not see; redirected ones
    /// are read on their node next; failed ones wake their consumers (they claim, and meet
    /// the failure or not) and are read again later. Outcomes of a read a stream no longer
    /// waits for are dropped.
    fn read(
        &self,
        tracking: &mut Tracking,
        node: String,
        read: u64,
        conn: Option<MultiplexedConnection>,
        outcomes: Vec<(String, Armed)>,
    ) {
        tracking.reading.remove(&node);
        match conn {
            Some(conn) => {
                tracking.links.entry(node).or_insert(conn);
            }
            // Whatever else the connection tracked is lost with it.
            None => self.lost_node(tracking, &node),
        }
        let mut state = self.state();
        let mut moved = false;
        for (name, outcome) in outcomes {
            let Some(stream) = tracking.streams.get_mut(&name) else {
                continue;
            };
            let announced = match stream.arming {
                Arming::Reading {
                    read: waited,
                    announced,
                } if waited == read => announced,
                _ => continue,
            };
            let covered = state.streams.get_mut(&name);
            match outcome {
                Armed::Tracked { top, delayed } => {
                    stream.arming = if announced {
                        Arming::Untracked
                    } else {
                        Arming::Tracked { top }
                    };
                    stream.pause = RECONNECT_FIRST;
                    stream.redirects = 0;
                    if let Some(covered) = covered {
                        let unseen_delayed = delayed && !covered.delayed_known;
                        if covered.after < top || unseen_delayed {
                            covered.after = covered.after.max(top);
                            covered.delayed_known |= delayed;
                            covered.signal.wake();
                        }
                    }
                }
                Armed::Moved(node) if stream.redirects < MOST_REDIRECTS => {
                    stream.node = tracking.cluster.reachable(&node);
                    stream.redirects += 1;
                    stream.arming = Arming::Untracked;
                    moved = true;
                }
                Armed::Moved(_) | Armed::Failed => {
                    if let Armed::Moved(node) = outcome {
                        stream.node = tracking.cluster.reachable(&node);
                    }
                    stream.redirects = 0;
                    stream.arming = Arming::RetryAt(Instant::now() + stream.pause);
                    stream.pause = (stream.pause * 2).min(RECONNECT_MOST);
                    stream.polled = Some(Instant::now());
                    if let Some(covered) = covered {
                        covered.signal.wake();
                    }
                }
            }
        }
        drop(state);
        if moved {
            tracking.ask_slots();
        }
    }

    /// A node's push: keys that changed wake their streams' consumers and are no longer
    /// tracked; a lost connection (or a flush: no keys named) does so for all its streams.
    fn announced(&self, tracking: &mut Tracking, node: &str, push: PushInfo) {
        match push.kind {
            PushKind::Invalidate => match push.data.first() {
                Some(Value::Array(keys)) => {
                    let keys: Vec<String> = keys.iter().filter_map(key_name).collect();
                    let state = self.state();
                    for (name, stream) in tracking.streams.iter_mut() {
                        if keys.iter().any(|k| k == name || *k == stream.delay_key) {
                            stream.untrack();
                            if let Some(covered) = state.streams.get(name) {
                                covered.signal.wake();
                            }
                        }
                    }
                }
                _ => self.untrack_node(tracking, node),
            },
            PushKind::Disconnection => self.lost_node(tracking, node),
            _ => {}
        }
    }

    /// A node's connection is lost: its streams are read again (where `CLUSTER SLOTS` now
    /// says their slots are, a failover having moved them maybe), and their consumers claim.
    fn lost_node(&self, tracking: &mut Tracking, node: &str) {
        tracking.links.remove(node);
        self.untrack_node(tracking, node);
        tracking.ask_slots();
    }

    /// Every stream read on `node` is read again, and its consumers claim (they may have
    /// missed a change).
    fn untrack_node(&self, tracking: &mut Tracking, node: &str) {
        let state = self.state();
        for (name, stream) in tracking.streams.iter_mut() {
            if stream.node == node {
                stream.untrack();
                if let Some(covered) = state.streams.get(name) {
                    covered.signal.wake();
                }
            }
        }
    }
}

impl Stream {
    /// The node tracks its keys no more (a change was announced, or the connection is lost).
    fn untrack(&mut self) {
        self.arming = match self.arming {
            Arming::Reading { read, .. } => Arming::Reading {
                read,
                announced: true,
            },
            Arming::RetryAt(at) => Arming::RetryAt(at),
            Arming::Untracked | Arming::Tracked { .. } => Arming::Untracked,
        };
    }
}

impl Tracking {
    /// Where a stream's keys are read first: its slot's node as `CLUSTER SLOTS` last said,
    /// else the seed (which answers `MOVED` if it is not).
    fn home(&self, stream: &str) -> String {
        self.owners
            .owner(slot(stream))
            .map_or_else(|| self.seed.clone(), str::to_owned)
    }

    /// Asks the cluster where its slots are now, unless that is under way; the answer comes
    /// back as an event.
    fn ask_slots(&mut self) {
        if self.asking_slots {
            return;
        }
        self.asking_slots = true;
        let (mut commands, events, timeout) =
            (self.commands.clone(), self.events.clone(), self.timeout);
        let seed_host = self.cluster.seed_host();
        tokio::spawn(async move {
            let mut slots = redis::cmd("CLUSTER");
            slots.arg("SLOTS");
            let reply = tokio::time::timeout(
                timeout + READ_MARGIN,
                slots.query_async::<Value>(&mut commands),
            )
            .await;
            let owners = match reply {
                Ok(Ok(reply)) => SlotOwners::from_reply(&reply, &seed_host),
                _ => None,
            };
            let _ = events.send(Event::Slots(owners));
        });
    }

    /// Takes the cluster's answer: streams that wait for a read (after a failure, or to be
    /// read at all) are read where their slot now is.
    fn rehome(&mut self, owners: Option<SlotOwners>) {
        self.asking_slots = false;
        let Some(owners) = owners else {
            return;
        };
        self.owners = owners;
        let moved: Vec<(String, String)> = self
            .streams
            .iter()
            .filter(|(_, s)| matches!(s.arming, Arming::Untracked | Arming::RetryAt(_)))
            .filter_map(|(name, s)| {
                let home = self.owners.owner(slot(name))?;
                (home != s.node).then(|| (name.clone(), home.to_owned()))
            })
            .collect();
        for (name, home) in moved {
            if let Some(stream) = self.streams.get_mut(&name) {
                stream.node = home;
                stream.arming = Arming::Untracked;
            }
        }
    }

    /// Starts reading the keys of `due` on their nodes: one task per node, one pipeline each,
    /// except on nodes whose last reads are still under way (their streams wait for them).
    fn start_reads(&mut self, due: Vec<String>) {
        let mut by_node: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for name in due {
            let Some(stream) = self.streams.get(&name) else {
                continue;
            };
            if self.reading.contains(&stream.node) {
                continue;
            }
            by_node
                .entry(stream.node.clone())
                .or_default()
                .push((name, stream.delay_key.clone()));
        }
        for (node, keys) in by_node {
            self.next_read += 1;
            let read = self.next_read;
            for (name, _) in &keys {
                if let Some(stream) = self.streams.get_mut(name) {
                    stream.arming = Arming::Reading {
                        read,
                        announced: false,
                    };
                }
            }
            self.reading.insert(node.clone());
            tokio::spawn(read_on_node(
                self.cluster.clone(),
                node.clone(),
                read,
                self.links.get(&node).cloned(),
                keys,
                self.events.clone(),
                self.timeout,
            ));
        }
    }

    /// Lets go of connections to nodes no stream is read on any more (the seed that
    /// redirected them, a node whose slots moved away), and pings the others: one that does
    /// not answer in time (a silent peer) is reported as lost.
    fn check_links(&mut self) {
        let streams = &self.streams;
        let reading = &self.reading;
        self.links
            .retain(|node, _| reading.contains(node) || streams.values().any(|s| s.node == *node));
        for (node, conn) in &self.links {
            tokio::spawn(ping_link(node.clone(), conn.clone(), self.events.clone()));
        }
    }
}

/// A key an invalidation names.
fn key_name(key: &Value) -> Option<String> {
    match key {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}
