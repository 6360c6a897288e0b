//! A cluster's idle consumers are woken by the servers' key tracking. A read over many streams
//! cannot span slots, so instead one connection per node (RESP3, `CLIENT TRACKING ON`) reads
//! each idle consumer's stream and delayed zset once (`XREVRANGE … COUNT 1`, `ZCARD`), and
//! the node then says, once, when either key changes: an entry added by any sender (ours or
//! another client's), a delayed member added, the key deleted or migrated away. The stream's
//! consumers are woken and claim; its keys are read, and so tracked, again when a consumer
//! waits once more. An idle queue thus costs no command while nothing happens, and a node
//! holds one such connection whatever the number of queues.
//! Invariant: a stream with idle consumers is tracked, or its consumers are woken to claim at
//! least every `RECONNECT_MOST` (its node could not be reached or the read was redirected);
//! its keys are read only after they registered, and a read that finds an entry above what
//! they registered wakes them (an entry added before the tracking began).

use super::{IdleRead, READ_BLOCK, RECONNECT_FIRST, RECONNECT_MOST};
use crate::engines::redis::blocked::READ_MARGIN;
use crate::engines::redis::connection::ClusterTarget;
use crate::engines::redis::replies::{last_id, StreamId};
use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use tokio::time::Instant;

/// Where a stream's keys stand with the node that holds them.
enum Arming {
    /// Not tracked (never read, or the node announced a change since).
    Untracked,
    /// Tracked since a read that saw `top` as the stream's last entry.
    Tracked { top: StreamId },
    /// The read failed: tried again (and the consumers woken) then.
    RetryAt(Instant),
}

struct Stream {
    /// The node its keys are read on, `host:port`: the seed at first, then where a `MOVED`
    /// sends it.
    node: String,
    delay_key: String,
    arming: Arming,
    /// Pause before the next read after a failed one; doubled on each failure.
    pause: Duration,
}

/// A node's tracking connection.
struct Link {
    conn: MultiplexedConnection,
}

/// A push from a node's connection, with the node it came from.
type Push = (String, PushInfo);

/// What a read of one stream's keys came to.
enum Armed {
    Tracked(StreamId),
    Moved(String),
    Failed,
}

impl IdleRead {
    /// Tracks the keys of the streams that have idle consumers on the nodes that hold them,
    /// and wakes a stream's consumers when a node announces a change (see the module doc).
    pub(super) async fn track_loop(self: Arc<Self>, cluster: ClusterTarget, timeout: Duration) {
        let (pushes, mut announced) = unbounded_channel::<Push>();
        let mut links: HashMap<String, Link> = HashMap::new();
        let mut streams: HashMap<String, Stream> = HashMap::new();
        let seed = cluster.seed_address();
        let mut check_at = Instant::now() + READ_BLOCK;
        loop {
            let seen = self.plan.seq();
            if self.closing.is_cancelled() {
                return;
            }
            let due = self.streams_to_read(&mut streams, &seed);
            if !due.is_empty() {
                let outcomes = tokio::select! {
                    outcomes = read_and_track(&cluster, &mut links, &streams, &due, &pushes, timeout) => outcomes,
                    _ = self.closing.cancelled() => return,
                };
                self.tracked(&mut streams, &mut links, outcomes);
                continue;
            }
            let retry_at = streams
                .values()
                .filter_map(|s| match s.arming {
                    Arming::RetryAt(at) => Some(at),
                    _ => None,
                })
                .min();
            let wake_at = retry_at.map_or(check_at, |at| at.min(check_at));
            tokio::select! {
                push = announced.recv() => {
                    if let Some((node, push)) = push {
                        self.announced(&mut streams, &mut links, &node, push);
                    }
                }
                _ = self.plan.changed(seen) => {}
                _ = tokio::time::sleep_until(wake_at) => {
                    if Instant::now() >= check_at {
                        check_at = Instant::now() + READ_BLOCK;
                        // A node none of the streams is read on any more (the seed that
                        // redirected them, a node whose slots moved away) is let go.
                        links.retain(|node, _| streams.values().any(|s| s.node == *node));
                        for node in dead_links(&links).await {
                            self.lost_node(&mut streams, &mut links, &node);
                        }
                    }
                }
                _ = self.closing.cancelled() => return,
            }
        }
    }

    /// Brings `streams` in line with the streams that have idle consumers, wakes consumers
    /// that registered below what their stream's last read saw, and returns the streams whose
    /// keys are to be read now.
    fn streams_to_read(&self, streams: &mut HashMap<String, Stream>, seed: &str) -> Vec<String> {
        self.prune();
        let now = Instant::now();
        let mut state = self.state();
        streams.retain(|name, _| state.streams.contains_key(name));
        let mut due = Vec::new();
        for (name, covered) in state.streams.iter_mut() {
            if covered.users == 0 {
                continue;
            }
            let stream = streams.entry(name.clone()).or_insert_with(|| Stream {
                node: seed.to_owned(),
                delay_key: covered.delay_key.clone(),
                arming: Arming::Untracked,
                pause: RECONNECT_FIRST,
            });
            match stream.arming {
                Arming::Tracked { top } if covered.after < top => {
                    covered.after = top;
                    covered.signal.wake();
                }
                Arming::Tracked { .. } => {}
                Arming::RetryAt(at) if at > now => {}
                Arming::Untracked | Arming::RetryAt(_) => due.push(name.clone()),
            }
        }
        due
    }

    /// Applies the reads' outcomes: tracked streams wake their consumers if an entry is above
    /// what they registered; redirected ones are read on their node next; failed ones wake
    /// their consumers (they claim, and meet the failure or not) and are read again later.
    fn tracked(
        &self,
        streams: &mut HashMap<String, Stream>,
        links: &mut HashMap<String, Link>,
        outcomes: Vec<(String, Armed)>,
    ) {
        let mut state = self.state();
        for (name, outcome) in outcomes {
            let Some(stream) = streams.get_mut(&name) else {
                continue;
            };
            let covered = state.streams.get_mut(&name);
            match outcome {
                Armed::Tracked(top) => {
                    stream.arming = Arming::Tracked { top };
                    stream.pause = RECONNECT_FIRST;
                    if let Some(covered) = covered {
                        if covered.after < top {
                            covered.after = top;
                            covered.signal.wake();
                        }
                    }
                }
                Armed::Moved(node) => {
                    stream.node = node;
                    stream.arming = Arming::Untracked;
                }
                Armed::Failed => {
                    links.remove(&stream.node);
                    stream.arming = Arming::RetryAt(Instant::now() + stream.pause);
                    stream.pause = (stream.pause * 2).min(RECONNECT_MOST);
                    if let Some(covered) = covered {
                        covered.signal.wake();
                    }
                }
            }
        }
    }

    /// A node's push: keys that changed wake their streams' consumers and are no longer
    /// tracked; a lost connection (or a flush: no keys named) does so for all its streams.
    fn announced(
        &self,
        streams: &mut HashMap<String, Stream>,
        links: &mut HashMap<String, Link>,
        node: &str,
        push: PushInfo,
    ) {
        match push.kind {
            PushKind::Invalidate => match push.data.first() {
                Some(Value::Array(keys)) => {
                    let keys: Vec<String> = keys
                        .iter()
                        .filter_map(|k| match k {
                            Value::BulkString(bytes) => {
                                Some(String::from_utf8_lossy(bytes).into_owned())
                            }
                            Value::SimpleString(text) => Some(text.clone()),
                            _ => None,
                        })
                        .collect();
                    let state = self.state();
                    for (name, stream) in streams.iter_mut() {
                        if keys.iter().any(|k| k == name || *k == stream.delay_key) {
                            stream.arming = Arming::Untracked;
                            if let Some(covered) = state.streams.get(name) {
                                covered.signal.wake();
                            }
                        }
                    }
                }
                _ => self.untrack_node(streams, node),
            },
            PushKind::Disconnection => self.lost_node(streams, links, node),
            _ => {}
        }
    }

    fn lost_node(
        &self,
        streams: &mut HashMap<String, Stream>,
        links: &mut HashMap<String, Link>,
        node: &str,
    ) {
        links.remove(node);
        self.untrack_node(streams, node);
    }

    /// Every stream read on `node` is read again, and its consumers claim (they may have
    /// missed a change).
    fn untrack_node(&self, streams: &mut HashMap<String, Stream>, node: &str) {
        let state = self.state();
        for (name, stream) in streams.iter_mut() {
            if stream.node == node {
                stream.arming = Arming::Untracked;
                if let Some(covered) = state.streams.get(name) {
                    covered.signal.wake();
                }
            }
        }
    }
}

/// Reads (and so tracks) the keys of each stream in `due` on its node, one pipeline per node,
/// the nodes at once. A node that cannot be reached fails its streams.
async fn read_and_track(
    cluster: &ClusterTarget,
    links: &mut HashMap<String, Link>,
    streams: &HashMap<String, Stream>,
    due: &[String],
    pushes: &UnboundedSender<Push>,
    timeout: Duration,
) -> Vec<(String, Armed)> {
    let mut by_node: BTreeMap<&str, Vec<&String>> = BTreeMap::new();
    for name in due {
        if let Some(stream) = streams.get(name) {
            by_node.entry(&stream.node).or_default().push(name);
        }
    }
    let reads = by_node.into_iter().map(|(node, names)| {
        let link = links.get(node).map(|l| l.conn.clone());
        async move {
            let conn = match link {
                Some(conn) => Ok(conn),
                None => open_link(cluster, node, pushes.clone(), timeout).await,
            };
            let Ok(mut conn) = conn else {
                let failed = names.iter().map(|n| ((*n).clone(), Armed::Failed));
                return (node.to_owned(), None, failed.collect());
            };
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for name in &names {
                pipe.cmd("XREVRANGE")
                    .arg(name.as_str())
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1)
                    .cmd("ZCARD")
                    .arg(streams.get(*name).map_or("", |s| s.delay_key.as_str()));
            }
            let replies = tokio::time::timeout(
                timeout + READ_MARGIN,
                pipe.query_async::<Vec<Value>>(&mut conn),
            )
            .await;
            let Ok(Ok(replies)) = replies else {
                let failed = names.iter().map(|n| ((*n).clone(), Armed::Failed));
                return (node.to_owned(), None, failed.collect());
            };
            let mut replies = replies.into_iter();
            let outcomes: Vec<(String, Armed)> = names
                .iter()
                .map(|name| {
                    let top = replies.next().unwrap_or(Value::Nil).extract_error();
                    let delayed = replies.next().unwrap_or(Value::Nil).extract_error();
                    ((*name).clone(), armed(top, delayed))
                })
                .collect();
            (node.to_owned(), Some(conn), outcomes)
        }
    });
    let mut outcomes = Vec::new();
    for (node, conn, read) in futures_util::future::join_all(reads).await {
        match conn {
            Some(conn) => {
                links.entry(node).or_insert(Link { conn });
            }
            None => {
                links.remove(&node);
            }
        }
        outcomes.extend(read);
    }
    outcomes
}

/// What the replies of one stream's reads say: tracked from the stream's last entry, moved
/// to another node (the slot's owner), or failed (an `ASK` mid-migration included: read
/// again after a pause).
fn armed(top: redis::RedisResult<Value>, delayed: redis::RedisResult<Value>) -> Armed {
    let moved = |e: &redis::RedisError| {
        matches!(
            e.kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::Moved)
        )
        .then(|| e.redirect_node().map(|(node, _)| node.to_owned()))
        .flatten()
    };
    match (top, delayed) {
        (Ok(top), Ok(_)) => last_id(&top).map_or(Armed::Failed, Armed::Tracked),
        (Err(e), _) | (_, Err(e)) => moved(&e).map_or(Armed::Failed, Armed::Moved),
    }
}

/// A tracking connection to `node`: RESP3, its pushes tagged with the node.
async fn open_link(
    cluster: &ClusterTarget,
    node: &str,
    pushes: UnboundedSender<Push>,
    timeout: Duration,
) -> redis::RedisResult<MultiplexedConnection> {
    let tag = node.to_owned();
    let sender = move |push: PushInfo| pushes.send((tag.clone(), push));
    let open = async {
        let mut conn = cluster.node_connection(node, timeout, sender).await?;
        redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .query_async::<()>(&mut conn)
            .await?;
        Ok(conn)
    };
    tokio::time::timeout(timeout + READ_MARGIN, open)
        .await
        .unwrap_or_else(|_| Err(redis::RedisError::from((redis::ErrorKind::Io, "no answer"))))
}

/// The nodes whose connection did not answer a `PING` in time (a silent peer).
async fn dead_links(links: &HashMap<String, Link>) -> Vec<String> {
    let pings = links.iter().map(|(node, link)| {
        let mut conn = link.conn.clone();
        async move {
            let ping = redis::cmd("PING");
            let answered =
                tokio::time::timeout(READ_MARGIN, ping.query_async::<Value>(&mut conn)).await;
            (!matches!(answered, Ok(Ok(_)))).then(|| node.clone())
        }
    });
    futures_util::future::join_all(pings)
        .await
        .into_iter()
        .flatten()
        .collect()
}
