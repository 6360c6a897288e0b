//! A send stored already claimed, for an idle consumer of this process (see
//! `crate::queue::hand_off`): one prepared INSERT, as an ordinary send is, that also sets
//! `delivered_at`, so that the hand-off costs what a send costs. The claim's stamp is chosen
//! here, as a PostgreSQL claim's is (`claim_doubt`): the first millisecond at or after the
//! server's time ([`ServerClock`], plus a margin for its lag) whose residue modulo the
//! attempt's span is its nonce. The statement stores nothing unless the stamp lies between
//! the server's `NOW(3)` and [`lateness_us`] after it; then the offset is read again and the
//! message goes the ordinary way. Should the reply be lost, the row is released by that
//! residue, within the time the attempt can have run in, among rows claimed within
//! [`lateness_us`] of their creation (which no renewal is).
//!
//! [`ServerClock`]: super::server_clock::ServerClock

use super::text_columns::bind_text;
use super::MySql;
use crate::engines::sql::claim_doubt::ClaimAttempt;
use crate::engines::sql::dialect::ClaimedInsert;
use crate::engines::sql::queue_context::QueueContext;
use crate::queue::engine::{ClaimToken, NewMessage, StoredMessage};
use sqlx::Row;

/// How far ahead of the noted server time a stamp is aimed: the offset lags the server by up
/// to the round trip that noted it.
const MARGIN_US: i64 = 3_000;
/// How much later than the server's `NOW(3)` a stamp may be, beyond the span: a claim lasts
/// at most this much longer than its lease, for any consumer.
const EXTRA_LATENESS_US: i64 = 10_000;

/// The latest a claimed insert's stamp may be after the row's creation, for `span_ms`.
pub fn lateness_us(span_ms: i64) -> i64 {
    span_ms * 1000 + EXTRA_LATENESS_US
}

/// One attempt at storing `message` claimed (see the module doc).
pub async fn insert_claimed(
    queue: &QueueContext<MySql>,
    message: &NewMessage,
    attempt: &mut ClaimAttempt,
) -> ClaimedInsert {
    let clock = &queue.target.extra.clock;
    let Some(now_us) = clock.now_us() else {
        return ClaimedInsert::NotStored;
    };
    let Ok(mut conn) = queue.target.acquire_for_write().await else {
        return ClaimedInsert::NotStored;
    };
    let token = stamp_us(now_us + MARGIN_US, attempt.nonce, attempt.span_ms);
    attempt.stamp();
    let as_bytes = (queue.target.extra.text_columns)
        .bytes_for(&mut conn, &queue.config.table)
        .await;
    let insert = sqlx::query(&queue.sql.claimed_insert).bind(&queue.config.queue);
    let insert = bind_text(insert, &message.body, as_bytes);
    let done = bind_text(insert, &message.headers, as_bytes)
        .bind(token)
        .bind(token)
        .bind(lateness_us(attempt.span_ms))
        .execute(&mut *conn)
        .await;
    match done {
        Ok(done) if done.rows_affected() == 1 => {
            queue.target.send_connection.keep(conn);
            ClaimedInsert::Stored(vec![StoredMessage {
                id: done.last_insert_id().to_string(),
                body: message.body.clone(),
                headers: message.headers.clone(),
                token: Some(ClaimToken::DeliveredAt(token)),
            }])
        }
        Ok(_) => {
            // The stamp fell outside the server's window: the offset has drifted.
            if let Ok(row) = sqlx::query(&queue.sql.now_token)
                .fetch_one(&mut *conn)
                .await
            {
                if let Ok(now) = row.try_get::<i64, _>("token") {
                    clock.note(now);
                }
            }
            queue.target.send_connection.keep(conn);
            ClaimedInsert::NotStored
        }
        Err(sqlx::Error::Database(_)) => ClaimedInsert::NotStored,
        Err(err) => ClaimedInsert::InDoubt(err),
    }
}

/// The first millisecond at or after `from_us` whose residue modulo `span_ms` is `nonce`, in
/// microseconds.
fn stamp_us(from_us: i64, nonce: i64, span_ms: i64) -> i64 {
    let from_ms = (from_us + 999).div_euclid(1000);
    let stamp_ms = (from_ms - nonce + span_ms - 1).div_euclid(span_ms) * span_ms + nonce;
    stamp_ms * 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_are_the_first_millisecond_with_the_residue() {
        for from_us in [
            1_700_000_000_000_000,
            1_700_000_000_000_001,
            1_700_000_000_099_999,
        ] {
            let stamp = stamp_us(from_us, 37, 100);
            assert!(stamp >= from_us);
            assert!(stamp - from_us < 100_000);
            assert_eq!((stamp / 1000).rem_euclid(100), 37);
            assert_eq!(stamp % 1000, 0);
        }
        assert_eq!(
            stamp_us(1_700_000_000_037_000, 37, 100),
            1_700_000_000_037_000
        );
    }
}
