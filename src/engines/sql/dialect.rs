//! The queue side of a SQL dialect: its insert, claim and reject (the parts whose SQL shape
//! is its own), its releases and renewals, and what it runs for many queues (PostgreSQL's
//! LISTEN connection). Everything else (list, find, count, leases, releases, idle waits,
//! retries, shutdown) is written once in [`super::TableQueue`] and [`super::SqlTarget`]; the
//! connection side (pool, first contact, statements, error classification) is
//! [`Connector`], below the target.
//!
//! Each method is handed the queue's [`QueueContext`] (its target, options and the dialect's
//! statements), not the table queue. Methods that run statements make one attempt and return
//! the driver's error: the table queue decides what is retried and how the error is reported.
//!
//! May import what is below it (connector, target, queue context, driver, ids, claim doubt),
//! never the table queue.

use super::claim_doubt::ClaimAttempt;
use super::connector::Connector;
use super::driver::{Driver, SqlResult};
use super::ids::{held_condition, HeldRow};
use super::queue_context::QueueContext;
use super::target::SqlTarget;
use crate::queue::engine::{Held, NewMessage, StoredMessage};
use crate::support::error::Result;
use crate::support::targets::Targets;
use futures_util::future::BoxFuture;
use std::sync::Arc;

/// What storing messages already claimed came to (see [`SqlDialect::insert_claimed`]).
pub enum ClaimedInsert {
    /// Stored and claimed, each row with its claim's token, in input order.
    Stored(Vec<StoredMessage>),
    /// Nothing stored: the server refused the statement.
    NotStored,
    /// No answer: the rows the attempt identifies may be stored, claimed by nobody.
    InDoubt(sqlx::Error),
}

/// The queue side of a dialect, over its connection side ([`Connector`]).
pub trait SqlDialect: Connector {
    /// Whether [`SqlDialect::insert_claimed`] stores anything.
    const CLAIMS_ON_INSERT: bool = false;

    /// The process-wide registry of this dialect's targets (one per DSN).
    fn targets() -> &'static Targets<SqlTarget<Self>>;

    /// Hands a queue's counters to what the dialect runs for many queues (PostgreSQL's LISTEN
    /// connection), so a logger hears when it is lost and back.
    fn watch(_queue: &QueueContext<Self>, _counters: &Arc<crate::queue::stats::Counters>) {}

    /// A consumer of the queue starts an idle wait on the table's shared poll.
    fn idles(_queue: &QueueContext<Self>) {}

    /// Whether push wake-ups are live right now for this queue.
    fn push_ready(_queue: &QueueContext<Self>) -> bool {
        false
    }

    /// Refuses, before it is queued, a message the server is known to be unable to take.
    fn check_message(_queue: &QueueContext<Self>, _message: &NewMessage) -> Result<()> {
        Ok(())
    }

    /// Stores a batch and returns the new ids in input order; owns its retry policy, since
    /// only the dialect knows whether its statement can have run when it failed.
    fn insert(
        queue: &QueueContext<Self>,
        messages: Vec<NewMessage>,
    ) -> BoxFuture<'_, Result<Vec<String>>>;

    /// Stores a due `message` already claimed, for an idle consumer of this process that takes
    /// it: the claim commits with the send, in one statement. What identifies the row is kept
    /// in `attempt` ([`SqlDialect::release_in_doubt`] releases it should the reply be lost).
    /// One attempt, never repeated: [`ClaimedInsert::NotStored`] leaves the message to an
    /// ordinary insert.
    fn insert_claimed<'a>(
        _queue: &'a QueueContext<Self>,
        _message: &'a NewMessage,
        _attempt: &'a mut ClaimAttempt,
    ) -> BoxFuture<'a, ClaimedInsert> {
        Box::pin(async { ClaimedInsert::NotStored })
    }

    /// Claims up to `limit` due rows, oldest first, each with its claim's token, noting in
    /// `attempt` what identifies them should the reply be lost (see [`super::claim_doubt`]).
    fn claim<'a>(
        queue: &'a QueueContext<Self>,
        limit: u32,
        attempt: &'a mut ClaimAttempt,
    ) -> BoxFuture<'a, SqlResult<Vec<StoredMessage>>>;

    /// Releases the rows a claim (or claimed insert) whose reply was lost may have taken:
    /// those it noted ([`ClaimAttempt::hold`]) while their claim is still its; for an attempt
    /// that noted none, those [`SqlDialect::release_by_stamp`] finds.
    fn release_in_doubt<'a>(
        queue: &'a QueueContext<Self>,
        attempt: &'a ClaimAttempt,
    ) -> BoxFuture<'a, SqlResult<()>> {
        let rows = attempt.held();
        if rows.is_empty() {
            return Self::release_by_stamp(queue, attempt);
        }
        Self::release(queue, held_condition(rows, Self::TOKEN_OF))
    }

    /// Releases the rows an attempt that noted none may have taken, found by the stamp its
    /// statement chose; by default there is no stamp, and nothing to find.
    fn release_by_stamp<'a>(
        _queue: &'a QueueContext<Self>,
        _attempt: &'a ClaimAttempt,
    ) -> BoxFuture<'a, SqlResult<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Atomically replaces row `id` by `copy`; `None` if it was gone, or if `token` is given
    /// and the row's claim is no longer that one.
    fn redeliver<'a>(
        queue: &'a QueueContext<Self>,
        id: i64,
        token: Option<i64>,
        copy: &'a NewMessage,
    ) -> BoxFuture<'a, SqlResult<Option<String>>>;

    /// Makes the rows `condition` matches claimable again at once.
    fn release(queue: &QueueContext<Self>, condition: String) -> BoxFuture<'_, SqlResult<()>>;

    /// Renews the claims on `rows` that are still theirs (their tokens match); returns the
    /// renewed rows with their new tokens. One attempt: a renewal changes tokens, so it is
    /// never repeated blindly.
    fn renew(queue: &QueueContext<Self>, rows: Vec<HeldRow>)
        -> BoxFuture<'_, SqlResult<Vec<Held>>>;
}

/// A renewal in one `UPDATE … RETURNING`: `head` is `UPDATE … SET delivered_at = <now> WHERE
/// delivered_at IS NOT NULL AND `.
pub fn renew_returning<'a, D: Connector>(
    queue: &'a QueueContext<D>,
    head: &str,
    rows: &[HeldRow],
) -> BoxFuture<'a, SqlResult<Vec<Held>>> {
    let sql = format!(
        "{head}{} RETURNING CAST(id AS TEXT) AS id, {} AS token",
        held_condition(rows, D::TOKEN_OF),
        D::TOKEN_OF
    );
    D::Db::fetch_held(&queue.target.pool, sql)
}
