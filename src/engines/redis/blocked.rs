//! A blocked read on a connection of its own to a single node (a consumer's own XREADGROUP,
//! the shared XREAD of the idle consumers): how long it may run past its BLOCK time,
//! and how it is ended early with `CLIENT UNBLOCK` from another connection.

use super::connection::{blocking_connection, Conn, SingleNode};
use redis::aio::MultiplexedConnection;
use redis::Value;
use std::time::Duration;

/// How long a blocked read may run past its BLOCK time, or past being ended, before its
/// connection is taken for dead and dropped (a silent peer must not hold `get()` or `close()`).
pub(super) const READ_MARGIN: Duration = Duration::from_secs(2);

/// How long an UNBLOCK that found nothing blocked waits for the read's reply before asking
/// again (doubling each time, within `READ_MARGIN`).
const UNBLOCK_PAUSE: Duration = Duration::from_millis(2);

/// A connection of its own for a blocked read, and its `CLIENT ID` for `CLIENT UNBLOCK`
/// (`None` where the server refuses the command: a read to be ended is then
/// waited for up to `READ_MARGIN`, or its connection dropped). Each step is bounded by
/// `timeout`; `Err(None)` when one went unanswered, else the driver's error.
pub(super) async fn open_blocked_read(
    node: &SingleNode,
    timeout: Duration,
) -> Result<(MultiplexedConnection, Option<i64>), Option<redis::RedisError>> {
    let opened = tokio::time::timeout(timeout, async {
        blocking_connection(&node.client().await?, timeout).await
    })
    .await
    .map_err(|_| None)?;
    let mut conn = opened.inspect_err(|e| node.heard(e)).map_err(Some)?;
    let client_id = tokio::time::timeout(
        timeout,
        redis::cmd("CLIENT").arg("ID").query_async::<i64>(&mut conn),
    )
    .await
    .map_err(|_| None)?
    .ok();
    Ok((conn, client_id))
}

/// Ends the blocked read of connection `client_id` now (`CLIENT UNBLOCK … TIMEOUT` over
/// `commands`, another connection) and takes its reply: nil, or entries that arrived just
/// before. Without a way to end it, or past `READ_MARGIN`, the read is taken for lost (an
/// error: the caller drops its connection).
pub(super) async fn unblock_read<F>(
    commands: Option<Conn>,
    client_id: Option<i64>,
    reading: &mut std::pin::Pin<&mut F>,
) -> redis::RedisResult<Value>
where
    F: std::future::Future<Output = redis::RedisResult<Value>>,
{
    let deadline = tokio::time::Instant::now() + READ_MARGIN;
    let mut pause = UNBLOCK_PAUSE;
    while let (Some(id), Some(mut conn)) = (client_id, commands.clone()) {
        let ended = redis::cmd("CLIENT")
            .arg("UNBLOCK")
            .arg(id)
            .arg("TIMEOUT")
            .query_async::<i64>(&mut conn)
            .await;
        // 0: nothing blocked yet: the read has answered (its reply is on its way), or it
        // has not reached the server (the UNBLOCK went over another connection, and
        // overtook it); asked again until it answers.
        if !matches!(ended, Ok(0)) {
            break;
        }
        match tokio::time::timeout(pause, reading.as_mut()).await {
            Ok(reply) => return reply,
            Err(_) if tokio::time::Instant::now() + pause < deadline => pause *= 2,
            Err(_) => break,
        }
    }
    // The unblocked read answers at once; a read that does not is on a dead or silent
    // connection, which the caller then drops instead of waiting on it.
    match tokio::time::timeout_at(deadline, reading.as_mut()).await {
        Ok(reply) => reply,
        Err(_) => Err(redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no reply to a blocked read after it was ended",
        ))),
    }
}
