//! The table queue, written once over every dialect: one queue name in one table, as the
//! [`Engine`] the engine-independent queue drives. It owns the glue that is the same in every
//! dialect (first contact, retries, error reporting, id parsing, list, find, count, leases,
//! releases, idle waits, shutdown) and hands the dialect only what is its own, through the
//! queue's [`QueueContext`]. Two parts live in files of their own: the consumer's idle wait
//! (`idle_wait`) and the sender's side of a hand-off (`hand_off`).
//!
//! The top of the SQL engine: it may import every file of it (dialect, queue context, target,
//! table pollers, retry, and the leaves), and none imports it but `super` (`open_engine`).

mod hand_off;
mod idle_wait;

use hand_off::Handed;

use super::claim_doubt::{stamp_span_ms, ClaimAttempt, InDoubt, InFlight};
use super::connector::TableStatements;
use super::dialect::SqlDialect;
use super::driver::{Driver, Param, SqlResult};
use super::errors::outcome_unknown;
use super::ids::{held_condition, held_rows, row_id, HeldRow};
use super::queue_context::{QueueConfig, QueueContext};
use super::retry::{retry, Repeat};
use super::target::{SqlTarget, MAX_POOL_CONNECTIONS, STATEMENT_BOUND};
use crate::queue::engine::WaitOutcome;
use crate::queue::engine::{one_fate, ClaimToken, Engine, Held, NewMessage, StoredMessage};
use crate::queue::hand_off::HandOffDesk;
use crate::queue::wake::WakeSignal;
use crate::support::dsn::SqlDsn;
use crate::support::error::{Cause, Error, Outcome, Result};
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// One queue of one table in dialect `D`.
pub struct TableQueue<D: SqlDialect> {
    /// What the dialect's methods are handed: the target, the options, its own statements.
    cx: QueueContext<D>,
    shared_sql: TableStatements,
    wake: Arc<WakeSignal>,
    hand_off: Arc<HandOffDesk<Vec<StoredMessage>>>,
    /// Claims (and sends stored claimed) of this queue in this process whose reply was lost,
    /// or whose rows could not be given back: released before the next claim.
    in_doubt: Arc<InDoubt>,
}

impl<D: SqlDialect> TableQueue<D> {
    /// Joins the DSN's shared target; opens no connection.
    pub fn open(dsn: &SqlDsn, config: QueueConfig) -> Result<Self> {
        let target = SqlTarget::<D>::join(
            D::targets(),
            dsn,
            config.connect_timeout,
            config.max_connections,
        )?;
        let wake = target.board.signal(&config.table, &config.queue);
        let hand_off = target.hand_offs.of(&config.table, &config.queue);
        let in_doubt = target.in_doubt.of(&config.table, &config.queue);
        let (shared_sql, sql) = D::statements(&config.table, config.use_notify);
        Ok(Self {
            cx: QueueContext {
                target,
                config,
                sql,
            },
            shared_sql,
            wake,
            hand_off,
            in_doubt,
        })
    }

    pub async fn ready(&self, op: &str) -> Result<()> {
        self.cx.target.ensure_reachable(op).await
    }

    /// The most any one operation may take: `connectTimeoutMs` plus `STATEMENT_BOUND`.
    pub fn response_bound(&self) -> Duration {
        self.cx.config.connect_timeout + STATEMENT_BOUND
    }

    /// Runs `operation` within the response bound. A write that runs out of it may have been
    /// applied: `what` (the messages of a send) is named in the error, never sent again.
    async fn bounded<T>(
        &self,
        op: &str,
        what: Option<&str>,
        operation: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.response_bound(), operation).await {
            Ok(result) => result,
            Err(_) => {
                let unknown = what.map_or(String::new(), |what| {
                    format!(" ({what} may have been stored; not sent again)")
                });
                let detail = format!(
                    "no reply from the server within {} ms",
                    self.response_bound().as_millis()
                );
                Err(Error::connection(format!(
                    "{} transport failed during \"{op}\": {detail}{unknown}",
                    D::FACTS.label,
                ))
                .caused_by(Cause::timed_out(detail))
                .with_outcome(Outcome::Unknown))
            }
        }
    }

    /// One claim attempt, after releasing the rows of earlier ones whose reply was lost. An
    /// attempt that failed without an answer is kept in doubt.
    async fn claim_once(&self, limit: u32) -> SqlResult<Vec<StoredMessage>> {
        self.release_in_doubt().await;
        let mut in_flight = InFlight::new(
            &self.in_doubt,
            ClaimAttempt::new(stamp_span_ms(self.claim_lease())),
        );
        let result = D::claim(&self.cx, limit, in_flight.attempt()).await;
        let attempt = in_flight.answered();
        match &result {
            Ok(rows) => {
                if let Some(token) = rows.first().and_then(|r| r.token?.delivered_at()) {
                    self.cx.target.recent_claims.note(token);
                }
            }
            Err(err) if outcome_unknown(err, D::classify(err)) => self.in_doubt.record(attempt),
            Err(_) => {}
        }
        result
    }

    /// Runs one delete statement. On a server, on the connection the last delete used (see
    /// `KeptConnection`): a worker's acks are written flush after flush, each as soon as the
    /// one before it is done.
    async fn delete_rows(&self, sql: &str) -> SqlResult<u64> {
        if !D::FACTS.has_server {
            let mut conn = self.cx.target.pool.acquire().await?;
            return D::Db::execute_counted(&mut conn, sql).await;
        }
        let kept = &self.cx.target.ack_connection;
        let mut conn = kept.take(&self.cx.target.pool).await?;
        let deleted = D::Db::execute_counted(&mut conn, sql).await?;
        kept.keep(conn);
        Ok(deleted)
    }

    /// Best effort: a release that fails is tried again by the next claim (the rows come
    /// back at their lease at the latest).
    async fn release_in_doubt(&self) {
        for attempt in self.in_doubt.pending(self.claim_lease()) {
            if D::release_in_doubt(&self.cx, &attempt).await.is_ok() {
                self.in_doubt.settled(&attempt);
            }
        }
    }

    /// Stores a batch as one statement (or hands it to a waiting consumer), within the
    /// response bound.
    async fn insert_all(&self, messages: Vec<NewMessage>) -> Result<Vec<String>> {
        // The send wakes the queue for its due messages; the soonest delayed one is expected.
        let soonest = messages
            .iter()
            .map(|m| m.delay_ms)
            .filter(|&delay| delay > 0.0)
            .fold(f64::INFINITY, f64::min);
        let stored = self
            .bounded("send", Some("the messages"), async move {
                self.ready("send").await?;
                if let Some(handed) = self.hand_off(&messages).await? {
                    return Ok(handed);
                }
                let ids = D::insert(&self.cx, messages).await?;
                self.expect_due(soonest);
                Ok(Handed {
                    ids,
                    given_back: false,
                })
            })
            .await?;
        // Outside the send's bound: the messages are stored, and a release that stalls
        // must not turn that into a failed send. One that fails stays owed.
        if stored.given_back {
            let _ = tokio::time::timeout(SIDE_RELEASE_BOUND, self.release_in_doubt()).await;
        }
        Ok(stored.ids)
    }

    /// An idempotent operation: each `attempt` repeated as [`retry`] allows, all of it bounded
    /// (with `reach`, reaching the target first); its error the user's.
    async fn retried<T, Fut>(
        &self,
        op: &str,
        reach: bool,
        attempt: impl FnMut() -> Fut,
    ) -> Result<T>
    where
        Fut: std::future::Future<Output = SqlResult<T>>,
    {
        self.bounded(op, None, async {
            if reach {
                self.ready(op).await?;
            }
            retry(
                Repeat::Idempotent,
                MAX_POOL_CONNECTIONS,
                |e| self.cx.target.classify(e),
                attempt,
            )
            .await
            .map_err(|e| self.cx.err(op, e))
        })
        .await
    }

    /// A read of the table (list, find, count): once the target is reachable, bounded, its
    /// error the user's.
    async fn read<T>(
        &self,
        op: &str,
        statement: impl std::future::Future<Output = SqlResult<T>>,
    ) -> Result<T> {
        self.bounded(op, None, async {
            self.ready(op).await?;
            statement.await.map_err(|e| self.cx.err(op, e))
        })
        .await
    }

    /// The queue-and-lease binds of the `count` and `next_due` statements.
    fn queue_and_lease(&self) -> [Param<'_>; 2] {
        [
            Param::Text(&self.cx.config.queue),
            Param::Float(self.cx.config.redeliver_timeout_seconds),
        ]
    }
}

/// How long a release made beside another operation may take: `close()`'s for the rows of
/// claims whose reply was lost, a send's for the rows a consumer did not take.
const SIDE_RELEASE_BOUND: Duration = Duration::from_secs(2);

impl<D: SqlDialect> Engine for TableQueue<D> {
    fn wake_signal(&self) -> Arc<WakeSignal> {
        self.wake.clone()
    }

    fn attach_counters(&self, counters: Arc<crate::queue::stats::Counters>) {
        D::watch(&self.cx, &counters);
    }

    fn shared_polls(&self) -> u64 {
        self.cx.target.pollers.polls(&self.cx.config.table)
    }

    fn setup(&self) -> BoxFuture<'_, Result<()>> {
        let sql = &self.shared_sql;
        Box::pin(self.retried("setup", true, || {
            D::Db::set_up(&self.cx.target.pool, sql.setup_done.as_deref(), &sql.setup)
        }))
    }

    fn check_message(&self, message: &NewMessage) -> Result<()> {
        D::check_message(&self.cx, message)
    }

    fn insert(&self, messages: Vec<NewMessage>) -> BoxFuture<'_, Vec<Result<String>>> {
        let count = messages.len();
        // One statement (or one transaction with the hand-off's claim): one fate for all.
        Box::pin(async move { one_fate(count, self.insert_all(messages).await) })
    }

    fn claim(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(self.retried("claim", true, move || self.claim_once(limit)))
    }

    fn idle<'a>(
        &'a self,
        seen: u64,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<WaitOutcome>> {
        Box::pin(self.idle_wait(seen, cancel))
    }

    fn keep_claimed(&self, held: Vec<Held>) -> BoxFuture<'_, Result<Vec<Held>>> {
        Box::pin(async move {
            let rows = held_rows(&held);
            if rows.is_empty() {
                return Ok(Vec::new());
            }
            self.bounded("claim", None, async {
                D::renew(&self.cx, rows)
                    .await
                    .map_err(|e| self.cx.err("claim", e))
            })
            .await
        })
    }

    fn send_bound(&self) -> Duration {
        self.response_bound()
    }

    fn unanswered_send(&self) -> Error {
        let detail = format!(
            "no reply from the server within {} ms",
            self.send_bound().as_millis()
        );
        Error::connection(format!(
            "{} transport failed during \"send\": {detail} (the message may have been stored; not sent again)",
            D::FACTS.label,
        ))
        .caused_by(Cause::timed_out(detail))
        .with_outcome(Outcome::Unknown)
    }

    fn claim_lease(&self) -> Duration {
        crate::support::durations::secs(self.cx.config.redeliver_timeout_seconds)
    }

    fn delete(&self, held: Vec<Held>) -> BoxFuture<'_, Result<u64>> {
        Box::pin(async move {
            let (fenced, by_id): (Vec<HeldRow>, Vec<HeldRow>) = held_rows(&held)
                .into_iter()
                .partition(|r| r.token.is_some());
            let mut stale = 0;
            for rows in [by_id, fenced] {
                if rows.is_empty() {
                    continue;
                }
                let sql = format!(
                    "{}{}",
                    self.shared_sql.delete_head,
                    held_condition(&rows, D::TOKEN_OF)
                );
                let deleted = self
                    .retried("ack", false, || self.delete_rows(&sql))
                    .await?;
                if rows[0].token.is_some() {
                    stale = (rows.len() as u64).saturating_sub(deleted);
                }
            }
            Ok(stale)
        })
    }

    fn redeliver(&self, held: Held, copy: NewMessage) -> BoxFuture<'_, Result<Option<String>>> {
        Box::pin(async move {
            let Some(id) = row_id(&held.id) else {
                return Ok(None);
            };
            let token = held.token.and_then(ClaimToken::delivered_at);
            let copied = self
                .retried("reject", false, || D::redeliver(&self.cx, id, token, &copy))
                .await?;
            if copied.is_some() {
                self.expect_due(copy.delay_ms);
            }
            Ok(copied)
        })
    }

    fn release(&self, held: Vec<Held>) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let rows = held_rows(&held);
            if rows.is_empty() {
                return Ok(());
            }
            let condition = held_condition(&rows, D::TOKEN_OF);
            // Idempotent (it only clears a claim), so a stale pooled connection is retried:
            // otherwise released rows would stay hidden for the whole lease.
            self.retried("release", false, || D::release(&self.cx, condition.clone()))
                .await
        })
    }

    fn list(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(async move {
            let params = [Param::Text(&self.cx.config.queue), Param::Int(limit.into())];
            let list = &self.shared_sql.list;
            self.read(
                "list",
                D::Db::fetch_messages(self.cx.target.runner(), list, &params),
            )
            .await
        })
    }

    fn find(&self, id: String) -> BoxFuture<'_, Result<Option<StoredMessage>>> {
        Box::pin(async move {
            let Some(id) = row_id(&id) else {
                return Ok(None);
            };
            let params = [Param::Int(id)];
            let find = &self.shared_sql.find;
            let found = D::Db::fetch_messages(self.cx.target.runner(), find, &params);
            // The id is the primary key: one row at most.
            Ok(self.read("find", found).await?.into_iter().next())
        })
    }

    fn count(&self) -> BoxFuture<'_, Result<i64>> {
        Box::pin(async move {
            let params = self.queue_and_lease();
            let count = &self.shared_sql.count;
            let counted = D::Db::fetch_count(self.cx.target.runner(), count, &params);
            self.read("count", counted).await
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // A last chance for rows a lost claim took, within a short bound: a server that
            // is still away leaves them to their lease.
            let _ = tokio::time::timeout(SIDE_RELEASE_BOUND, self.release_in_doubt()).await;
            self.cx.target.leave().await
        })
    }
}
