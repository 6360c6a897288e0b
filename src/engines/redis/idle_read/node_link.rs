//! A cluster node's tracking connection, as the tracking loop (`tracking`) uses it from tasks
//! of its own: opening it (RESP3, `CLIENT TRACKING ON`), reading a batch of streams' keys on
//! it, pinging it; each reports back as an `Event`, beside the node's pushes.

use super::slot_owners::SlotOwners;
use crate::engines::redis::blocked::READ_MARGIN;
use crate::engines::redis::connection::ClusterTarget;
use crate::engines::redis::replies::{last_id, StreamId};
use redis::aio::MultiplexedConnection;
use redis::{PushInfo, PushKind, Value};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// What reaches the loop.
pub(super) enum Event {
    /// A node's push (a key invalidation, the library's disconnection notice; a failed health
    /// check comes as a disconnection).
    Push(String, PushInfo),
    /// A node's reads came back: read number `read`, the connection it went over (`None`: it
    /// failed, or could not be made) and what each stream's read came to.
    Read {
        node: String,
        read: u64,
        conn: Option<MultiplexedConnection>,
        outcomes: Vec<(String, Armed)>,
    },
    /// The answer to `CLUSTER SLOTS` (`None`: it failed).
    Slots(Option<SlotOwners>),
}

/// What a read of one stream's keys came to.
pub(super) enum Armed {
    /// Tracked from the stream's last entry; `delayed`: the zset has members.
    Tracked {
        top: StreamId,
        delayed: bool,
    },
    Moved(String),
    Failed,
}

/// Reads (and so tracks) each stream's keys on `node`, over `link` or a connection made now,
/// and reports the outcome as an event. A connection that fails fails every stream.
pub(super) async fn read_on_node(
    cluster: ClusterTarget,
    node: String,
    read: u64,
    link: Option<MultiplexedConnection>,
    keys: Vec<(String, String)>,
    events: UnboundedSender<Event>,
    timeout: Duration,
) {
    let conn = match link {
        Some(conn) => Ok(conn),
        None => open_link(&cluster, &node, events.clone(), timeout).await,
    };
    let failed = |keys: Vec<(String, String)>| {
        keys.into_iter()
            .map(|(stream, _)| (stream, Armed::Failed))
            .collect()
    };
    let Ok(mut conn) = conn else {
        let _ = events.send(Event::Read {
            node,
            read,
            conn: None,
            outcomes: failed(keys),
        });
        return;
    };
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for (stream, delay_key) in &keys {
        pipe.cmd("XREVRANGE")
            .arg(stream)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .cmd("ZCARD")
            .arg(delay_key);
    }
    let replies = tokio::time::timeout(
        timeout + READ_MARGIN,
        pipe.query_async::<Vec<Value>>(&mut conn),
    )
    .await;
    let event = match replies {
        Ok(Ok(replies)) => {
            let mut replies = replies.into_iter();
            let outcomes = keys
                .into_iter()
                .map(|(stream, _)| {
                    let top = replies.next().unwrap_or(Value::Nil).extract_error();
                    let delayed = replies.next().unwrap_or(Value::Nil).extract_error();
                    (stream, armed(top, delayed))
                })
                .collect();
            Event::Read {
                node,
                read,
                conn: Some(conn),
                outcomes,
            }
        }
        _ => Event::Read {
            node,
            read,
            conn: None,
            outcomes: failed(keys),
        },
    };
    let _ = events.send(event);
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
        (Ok(top), Ok(delayed)) => match last_id(&top) {
            Some(top) => Armed::Tracked {
                top,
                delayed: !matches!(delayed, Value::Int(0)),
            },
            None => Armed::Failed,
        },
        (Err(e), _) | (_, Err(e)) => moved(&e).map_or(Armed::Failed, Armed::Moved),
    }
}

/// A tracking connection to `node`: RESP3, its pushes sent on as events tagged with the node.
async fn open_link(
    cluster: &ClusterTarget,
    node: &str,
    events: UnboundedSender<Event>,
    timeout: Duration,
) -> redis::RedisResult<MultiplexedConnection> {
    let tag = node.to_owned();
    let sender = move |push: PushInfo| events.send(Event::Push(tag.clone(), push));
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

/// Pings a node's tracking connection: one that does not answer within `READ_MARGIN` (a
/// silent peer) is reported as lost, as the library reports a closed one.
pub(super) async fn ping_link(
    node: String,
    mut conn: MultiplexedConnection,
    events: UnboundedSender<Event>,
) {
    let ping = redis::cmd("PING");
    let answered = tokio::time::timeout(READ_MARGIN, ping.query_async::<Value>(&mut conn)).await;
    if !matches!(answered, Ok(Ok(_))) {
        let lost = PushInfo {
            kind: PushKind::Disconnection,
            data: Vec::new(),
        };
        let _ = events.send(Event::Push(node, lost));
    }
}
