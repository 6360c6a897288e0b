//! A send stored already claimed, for an idle consumer of this process (see
//! `crate::queue::hand_off`): one INSERT that also stamps `delivered_at` as a claim does (the
//! first millisecond at or after `now()` whose residue modulo the attempt's span is its
//! nonce), so the consumer's wake-up costs no claim of its own. Should the reply be lost, the
//! row is released by that residue, as a lost claim's rows are (`release_by_stamp`).

use super::{pooled, Postgres};
use crate::engines::sql::claim_doubt::ClaimAttempt;
use crate::engines::sql::dialect::ClaimedInsert;
use crate::engines::sql::driver::{rows_on, Driver};
use crate::engines::sql::queue_context::QueueContext;
use crate::queue::engine::{ClaimToken, NewMessage, StoredMessage};
use sqlx::Row;

/// One attempt at storing `message` claimed (see the module doc).
pub async fn insert_claimed(
    queue: &QueueContext<Postgres>,
    message: &NewMessage,
    attempt: &mut ClaimAttempt,
) -> ClaimedInsert {
    let Ok(mut conn) = queue.target.acquire_for_write().await else {
        return ClaimedInsert::NotStored;
    };
    attempt.stamp();
    let insert = sqlx::query::<sqlx::Postgres>(&queue.sql.claimed_insert)
        .bind(&queue.config.queue)
        .bind(&message.body)
        .bind(&message.headers)
        .bind(attempt.nonce)
        .bind(attempt.span_ms);
    let rows = match rows_on(&mut *conn, pooled(queue), insert).await {
        Ok(rows) => rows,
        // Refused: nothing was stored, and the message goes the ordinary way.
        Err(sqlx::Error::Database(_)) => return ClaimedInsert::NotStored,
        Err(err) => return ClaimedInsert::InDoubt(err),
    };
    let stored = rows.first().map(|row| {
        row.try_get::<String, _>("id")
            .and_then(|id| Ok((id, sqlx::Postgres::token_of(row)?)))
    });
    match stored {
        Some(Ok((id, token))) => {
            queue.target.send_connection.keep(conn);
            ClaimedInsert::Stored(vec![StoredMessage {
                id,
                body: message.body.clone(),
                headers: message.headers.clone(),
                token: Some(ClaimToken::DeliveredAt(token)),
            }])
        }
        // Stored, but not as we can name it: released by its residue like a lost reply.
        Some(Err(err)) => ClaimedInsert::InDoubt(err),
        None => ClaimedInsert::InDoubt(sqlx::Error::RowNotFound),
    }
}
