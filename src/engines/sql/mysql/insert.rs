//! MySQL sends: multi-row INSERTs cut so that no statement exceeds the server's
//! `max_allowed_packet`. A batch that fits one packet is one autocommit statement; a larger
//! one is one transaction over several, so a send never half-succeeds. Ids are computed from
//! the first id of each statement: InnoDB gives a simple multi-row insert consecutive ids,
//! spaced by `auto_increment_increment`.

use super::text_columns::bind_text;
use super::MySql;
use crate::engines::sql::driver::SqlResult;
use crate::engines::sql::queue_context::QueueContext;
use crate::queue::engine::NewMessage;
use crate::support::error::{Error, Result};
use sqlx::pool::PoolConnection;
use std::ops::Range;
use std::sync::atomic::Ordering;

/// Leave room for the statement text and protocol framing in `max_allowed_packet`.
const PACKET_HEADROOM: u64 = 64 * 1024;
/// INSERTs of up to this many rows stay prepared on their connection: each row count is its
/// own statement, and an unprepared one costs a PREPARE round trip before every EXECUTE. 64
/// shapes fit sqlx's statement cache (100 per connection) beside the claim's; concurrent sends
/// of a busy producer mostly batch below it, and rarer larger ones are prepared per flush.
const PREPARED_INSERT_ROWS: usize = 64;

/// Splits a batch so that no statement exceeds `max_allowed_packet`; a single message that
/// cannot fit is refused before anything is written.
pub fn packets(queue: &QueueContext<MySql>, messages: &[NewMessage]) -> Result<Vec<Range<usize>>> {
    let max_packet = queue.target.extra.max_packet.load(Ordering::Relaxed);
    let limit = max_packet.saturating_sub(PACKET_HEADROOM).max(1024);
    let mut ranges = Vec::new();
    let (mut start, mut size) = (0usize, 0u64);
    for (i, m) in messages.iter().enumerate() {
        // Bound as a prepared statement, strings travel unescaped with a length prefix.
        let bytes = (m.body.len() + m.headers.len() + queue.config.queue.len() + 64) as u64;
        if bytes > limit {
            return Err(Error::transport(format!(
                "MySQL transport failed during \"send\": a message of {bytes} bytes does not fit the server's max_allowed_packet ({max_packet} bytes); raise max_allowed_packet on the server."
            )));
        }
        if size + bytes > limit && i > start {
            ranges.push(start..i);
            start = i;
            size = 0;
        }
        size += bytes;
    }
    if start < messages.len() {
        ranges.push(start..messages.len());
    }
    Ok(ranges)
}

/// One attempt at storing a batch cut into `ranges`.
pub async fn insert_once(
    queue: &QueueContext<MySql>,
    messages: &[NewMessage],
    ranges: &[Range<usize>],
) -> SqlResult<Vec<String>> {
    let step = queue.target.extra.id_step.load(Ordering::Relaxed);
    let mut ids = Vec::with_capacity(messages.len());
    let mut conn = queue.target.acquire_for_write().await?;
    let as_bytes = (queue.target.extra.text_columns)
        .bytes_for(&mut conn, &queue.config.table)
        .await;
    let inserts = Inserts {
        queue,
        as_bytes,
        step,
    };
    if let [range] = ranges {
        inserts
            .chunk(&mut conn, &messages[range.clone()], &mut ids)
            .await?;
        woken_and_kept(queue, conn).await;
        return Ok(ids);
    }
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    for range in ranges {
        inserts
            .chunk(&mut tx, &messages[range.clone()], &mut ids)
            .await?;
    }
    tx.commit().await?;
    woken_and_kept(queue, conn).await;
    Ok(ids)
}

/// What each INSERT of one send is written with: its queue, whether its text travels as bytes (see
/// `text_columns`), and the server's `auto_increment_increment`.
struct Inserts<'a> {
    queue: &'a QueueContext<MySql>,
    as_bytes: bool,
    step: u64,
}

impl Inserts<'_> {
    /// One multi-row INSERT of `chunk` on `conn`; the ids it gave are appended to `ids`.
    async fn chunk(
        &self,
        conn: &mut sqlx::MySqlConnection,
        chunk: &[NewMessage],
        ids: &mut Vec<String>,
    ) -> SqlResult<()> {
        let sql = self.queue.sql.insert(chunk.len());
        let done = bind_rows(self.queue, &sql, chunk, self.as_bytes)
            .execute(&mut *conn)
            .await?;
        let first = done.last_insert_id();
        ids.extend((0..chunk.len() as u64).map(|i| (first + i * self.step).to_string()));
        Ok(())
    }
}

/// After a committed insert: other processes' idle consumers are woken over the send's
/// connection, which is then kept for the next send (unless the wake-up failed: the insert
/// stands, the connection is closed). Done before the send is answered, on the one
/// connection, so that a sender holds no second connection and close() finds none busy.
async fn woken_and_kept(queue: &QueueContext<MySql>, mut conn: PoolConnection<sqlx::MySql>) {
    if queue
        .target
        .extra
        .wake_ups
        .wake_others(&mut conn)
        .await
        .is_ok()
    {
        queue.target.send_connection.keep(conn);
    } else {
        conn.close_on_drop();
    }
}

/// The multi-row INSERT for `chunk`; the delay travels in microseconds, the text as bytes
/// when `as_bytes` (see `text_columns`).
fn bind_rows<'q>(
    queue: &'q QueueContext<MySql>,
    sql: &'q str,
    chunk: &'q [NewMessage],
    as_bytes: bool,
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments> {
    let mut query = sqlx::query(sql).persistent(chunk.len() <= PREPARED_INSERT_ROWS);
    for m in chunk {
        query = bind_text(query.bind(&queue.config.queue), &m.body, as_bytes);
        query = bind_text(query, &m.headers, as_bytes).bind(delay_micros(m));
    }
    query
}

/// A message's delay in whole microseconds, as `INTERVAL ? MICROSECOND` takes it.
pub fn delay_micros(message: &NewMessage) -> i64 {
    (message.delay_ms * 1000.0).round() as i64
}
