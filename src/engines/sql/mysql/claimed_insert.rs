//! Sends stored already claimed, for an idle consumer of this process (see
//! `crate::queue::hand_off`): `BEGIN`, the INSERT with `delivered_at` set, and the SELECT of
//! the first id and the claim's token in one round trip, then the `COMMIT`. The rows and the
//! token are known before the `COMMIT` is sent, so a `COMMIT` whose reply is lost leaves
//! rows that the next claim (or `close()`) releases, exactly as a lost claim's.

use super::{InTransaction, MySql};
use crate::engines::sql::claim_doubt::ClaimAttempt;
use crate::engines::sql::dialect::ClaimedInsert;
use crate::engines::sql::ids::HeldRow;
use crate::engines::sql::queue_context::QueueContext;
use crate::queue::engine::{NewMessage, StoredMessage};
use sqlx::Row;
use std::sync::atomic::Ordering;

/// One attempt (see the module doc).
pub async fn insert_claimed(
    queue: &QueueContext<MySql>,
    messages: &[NewMessage],
    attempt: &mut ClaimAttempt,
) -> ClaimedInsert {
    let Ok(mut conn) = queue.target.acquire_for_write().await else {
        return ClaimedInsert::NotStored;
    };
    let mut tx = InTransaction::new(&mut conn);
    let begin = queue
        .sql
        .begin_claimed_insert(&queue.config.queue, messages);
    let first = match sqlx::Executor::fetch_one(&mut **tx.conn, begin.as_str()).await {
        Ok(row) => row,
        Err(err) => {
            tx.end_after(&err).await;
            return ClaimedInsert::NotStored;
        }
    };
    // Unreadable, the transaction is left uncommitted: dropped, the connection closes and
    // the server rolls it back.
    let first_id = first
        .try_get::<String, _>("id")
        .ok()
        .and_then(|id| id.parse::<u64>().ok());
    let (Some(first_id), Ok(token)) = (first_id, first.try_get::<i64, _>("token")) else {
        return ClaimedInsert::NotStored;
    };
    let step = queue.target.extra.id_step.load(Ordering::Relaxed);
    let rows: Vec<StoredMessage> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| StoredMessage {
            id: (first_id + i as u64 * step).to_string(),
            body: m.body.clone(),
            headers: m.headers.clone(),
            token: Some(token),
        })
        .collect();
    attempt.hold(
        rows.iter()
            .filter_map(|r| r.id.parse().ok())
            .map(|id| HeldRow {
                id,
                token: Some(token),
            })
            .collect(),
    );
    match sqlx::Executor::execute(&mut **tx.conn, "COMMIT").await {
        Ok(_) => {
            tx.ended = true;
            drop(tx);
            queue.target.send_connection.keep(conn);
            ClaimedInsert::Stored(rows)
        }
        // The server answered: the transaction is over, rolled back.
        Err(err @ sqlx::Error::Database(_)) => {
            tx.end_after(&err).await;
            ClaimedInsert::NotStored
        }
        Err(err) => ClaimedInsert::InDoubt(err),
    }
}
