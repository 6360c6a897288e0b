//! The table queue, written once over every dialect: one queue name in one table, as the
//! [`Engine`] the engine-independent queue drives. It owns the glue that is the same in every
//! dialect (first contact, retries, error reporting, id parsing, list, find, count, leases,
//! releases, idle waits, shutdown) and hands the dialect only what is its own, through the
//! queue's [`QueueContext`].
//!
//! The top of the SQL engine: it may import every file of it (dialect, queue context, target,
//! table pollers, retry, and the leaves), and none imports it but `super` (`open_engine`).

use super::claim_doubt::{stamp_span_ms, ClaimAttempt, InDoubt};
use super::connector::TableStatements;
use super::dialect::{ClaimedInsert, SqlDialect};
use super::driver::{Driver, Param, SqlResult};
use super::errors::outcome_unknown;
use super::ids::{held_condition, held_rows, row_id, HeldRow};
use super::queue_context::{QueueConfig, QueueContext};
use super::retry::with_transient_retry;
use super::table_poller::{self, IdleQueue};
use super::target::{SqlTarget, MAX_POOL_CONNECTIONS, STATEMENT_BOUND};
use crate::queue::engine::WaitOutcome;
use crate::queue::engine::{Engine, Held, NewMessage, StoredMessage};
use crate::queue::hand_off::{HandOffDesk, Ticket};
use crate::queue::wake::WakeSignal;
use crate::support::dsn::SqlDsn;
use crate::support::error::{Cause, Error, Result};
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// One queue of one table in dialect `D`.
pub struct TableQueue<D: SqlDialect> {
    /// What the dialect's methods are handed: the target, the options, its own statements.
    cx: QueueContext<D>,
    shared_sql: TableStatements,
    wake: Arc<WakeSignal>,
    hand_off: Arc<HandOffDesk<Vec<StoredMessage>>>,
    /// Claims whose reply was lost: their rows are released before the next claim.
    in_doubt: InDoubt,
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
        let hand_off = target.hand_offs.desk(&config.table, &config.queue);
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
            in_doubt: InDoubt::default(),
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
                .caused_by(Cause::timed_out(detail)))
            }
        }
    }

    /// One claim attempt, after releasing the rows of earlier ones whose reply was lost. An
    /// attempt that failed without an answer is kept in doubt.
    async fn claim_once(&self, limit: u32) -> SqlResult<Vec<StoredMessage>> {
        self.release_in_doubt().await;
        let mut attempt = ClaimAttempt::new(stamp_span_ms(self.claim_lease()));
        let result = D::claim(&self.cx, limit, &mut attempt).await;
        match &result {
            Ok(rows) => {
                if let Some(token) = rows.first().and_then(|r| r.token) {
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

    /// Stores due `messages` claimed for an idle consumer of this process and hands them to
    /// it (see `crate::queue::hand_off`), where the dialect can and a consumer waits: their
    /// ids, or `None` when they were not stored so and go the ordinary way.
    async fn hand_off(&self, messages: &[NewMessage]) -> Result<Option<Vec<String>>> {
        let bytes: usize = messages
            .iter()
            .map(|m| m.body.len() + m.headers.len())
            .sum();
        if !D::CLAIMS_ON_INSERT
            || messages.len() > MAX_HANDED_MESSAGES
            || bytes > MAX_HANDED_BYTES
            || messages.iter().any(|m| m.delay_ms > 0.0)
        {
            return Ok(None);
        }
        let Some(taker) = self.hand_off.take() else {
            return Ok(None);
        };
        let mut attempt = ClaimAttempt::new(stamp_span_ms(self.claim_lease()));
        match D::insert_claimed(&self.cx, messages, &mut attempt).await {
            ClaimedInsert::Stored(rows) => {
                let ids = rows.iter().map(|r| r.id.clone()).collect();
                let token = rows.first().and_then(|r| r.token);
                match taker.give(rows) {
                    Ok(()) => {
                        // A live claim of this process: later releases by residue spare it.
                        if let Some(token) = token {
                            self.cx.target.recent_claims.note(token);
                        }
                    }
                    // The consumer stopped waiting meanwhile: the rows go back to the queue.
                    Err(rows) => {
                        attempt.hold(
                            rows.iter()
                                .filter_map(|r| {
                                    row_id(&r.id).map(|id| HeldRow { id, token: r.token })
                                })
                                .collect(),
                        );
                        if D::release_in_doubt(&self.cx, &attempt).await.is_err() {
                            self.in_doubt.record(attempt);
                        }
                    }
                }
                Ok(Some(ids))
            }
            ClaimedInsert::NotStored => Ok(None),
            ClaimedInsert::InDoubt(err) => {
                // Released at once if the server can be reached, else by the next claim or
                // by `close()`; the send says the messages may have been stored.
                self.in_doubt.record(attempt);
                self.release_in_doubt().await;
                self.wake.wake();
                Err(self.cx.target.write_error("send", "the messages", &err))
            }
        }
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

    /// The queue-and-lease binds of the `count` and `next_due` statements.
    fn queue_and_lease(&self) -> [Param<'_>; 2] {
        [
            Param::Text(&self.cx.config.queue),
            Param::Float(self.cx.config.redeliver_timeout_seconds),
        ]
    }

    /// Milliseconds until the next unclaimed row is due (≤ 0: due now), `None` if none is.
    async fn next_due_in_ms(&self) -> Result<Option<f64>> {
        let params = self.queue_and_lease();
        self.bounded("claim", None, async {
            D::Db::fetch_wait_ms(self.cx.target.runner(), &self.shared_sql.next_due, &params)
                .await
                .map_err(|e| self.cx.err("claim", e))
        })
        .await
    }

    /// Sleeps until the next delayed message is due, capped by the notify timeout while push
    /// wake-ups are live, else by the poll interval; any wake-up (a NOTIFY, a send in this
    /// process) or `cancel` ends it early.
    async fn idle_wait(&self, seen: u64, cancel: &CancellationToken) -> Result<WaitOutcome> {
        let mut ticket = D::CLAIMS_ON_INSERT.then(|| self.hand_off.wait_here());
        let outcome = self.wait_idle(seen, cancel, &mut ticket).await;
        // Leaving the desk: what a send handed over as the wait ended is taken all the same
        // (a claim's rows, even past a failure or a cancel), never dropped with the ticket.
        match ticket.and_then(Ticket::leave) {
            Some(rows) => Ok(WaitOutcome::Claimed(rows)),
            None => outcome,
        }
    }

    async fn wait_idle(
        &self,
        seen: u64,
        cancel: &CancellationToken,
        ticket: &mut Option<Ticket<Vec<StoredMessage>>>,
    ) -> Result<WaitOutcome> {
        let push = D::FACTS.push_wakeup && self.cx.config.use_notify && D::push_ready(&self.cx);
        let cap = if push {
            self.cx.config.notify_timeout
        } else {
            self.cx.config.poll_interval
        };
        if D::FACTS.shared_poll && !push && cap > MIN_IDLE_WAIT {
            return Ok(self.wait_for_shared_poll(seen, cancel, ticket).await);
        }
        let timeout = if cap <= MIN_IDLE_WAIT {
            cap
        } else {
            // A failed peek just means "nothing scheduled": the cap still bounds the wait. The
            // peek ends with the wait's cancel: an abort or a close() must not leave a native
            // call running on a silent server after it (up to the statement bound), which
            // kept a process that had closed everything from exiting cleanly.
            let peek = tokio::select! {
                peek = self.next_due_in_ms() => peek,
                _ = cancel.cancelled() => return Ok(WaitOutcome::Cancelled),
            };
            match peek {
                Ok(Some(ms)) => crate::support::durations::millis(ms)
                    .min(cap)
                    .max(MIN_IDLE_WAIT),
                _ => cap,
            }
        };
        Ok(self.wait_on_signal(seen, timeout, cancel, ticket).await)
    }

    /// Waits on the queue's signal as [`WakeSignal::wait`] does, and ends with the messages a
    /// send of this process hands over at `ticket` meanwhile (see `crate::queue::hand_off`).
    async fn wait_on_signal(
        &self,
        seen: u64,
        timeout: Duration,
        cancel: &CancellationToken,
        ticket: &mut Option<Ticket<Vec<StoredMessage>>>,
    ) -> WaitOutcome {
        if let Some(at_desk) = ticket.as_mut() {
            tokio::select! {
                biased;
                handed = at_desk.handed() => match handed {
                    Some(rows) => return WaitOutcome::Claimed(rows),
                    // The sender stored nothing claimed: its ordinary insert wakes the queue.
                    None => *ticket = None,
                },
                end = self.wake.wait(seen, timeout, cancel) => return end.into(),
            }
        }
        self.wake.wait(seen, timeout, cancel).await.into()
    }

    /// Waits for a wake-up: a send, release or reject in this process, or the table's shared
    /// poll (rows stored by other processes, delayed rows coming due, lapsed claims). The
    /// consumer runs no statement of its own while that poll answers; when it stops answering
    /// (a failed poll also wakes every consumer at once) the wait ends at its cap, and the
    /// consumer claims as it would after any wake-up.
    async fn wait_for_shared_poll(
        &self,
        seen: u64,
        cancel: &CancellationToken,
        ticket: &mut Option<Ticket<Vec<StoredMessage>>>,
    ) -> WaitOutcome {
        let interval = self.cx.config.poll_interval;
        let watch = table_poller::watch(
            &self.cx.target,
            &self.cx.config.table,
            IdleQueue {
                queue: self.cx.config.queue.clone(),
                interval,
                lease: self.claim_lease(),
            },
        );
        let cap = (interval * 10)
            .clamp(MIN_SHARED_POLL_CAP, MAX_SHARED_POLL_CAP)
            .max(interval * 2);
        loop {
            match self.wait_on_signal(seen, cap, cancel, ticket).await {
                WaitOutcome::TimedOut if watch.fresh(cap) => continue,
                outcome => return outcome,
            }
        }
    }

    /// A row this queue stored becomes due in `delay_ms`: the table's poll wakes the queue's
    /// idle consumers then (a due row is woken for by the send itself).
    fn expect_due(&self, delay_ms: f64) {
        let notified = D::FACTS.push_wakeup && self.cx.config.use_notify;
        if D::FACTS.shared_poll && !notified && delay_ms > 0.0 && delay_ms.is_finite() {
            let at = Instant::now() + crate::support::durations::millis(delay_ms);
            self.cx
                .target
                .pollers
                .expect(&self.cx.config.table, &self.cx.config.queue, at);
        }
    }
}

/// The most messages, and bytes of them, a send hands straight to an idle consumer: an idle
/// consumer's wake-up is a send of one; a batch means the queue is busy.
const MAX_HANDED_MESSAGES: usize = 1;
const MAX_HANDED_BYTES: usize = 64 * 1024;

/// How long `close()` tries to release the rows of claims whose reply was lost.
const SHUTDOWN_RELEASE_BOUND: Duration = Duration::from_secs(2);

/// Shortest idle wait: due rows that SKIP LOCKED skipped are re-tried this soon.
const MIN_IDLE_WAIT: Duration = Duration::from_millis(10);

/// Bounds of an idle wait on a shared poll (ten intervals within these): past it, a consumer
/// whose table's poll has not answered for as long claims on its own.
const MIN_SHARED_POLL_CAP: Duration = Duration::from_secs(1);
const MAX_SHARED_POLL_CAP: Duration = Duration::from_secs(30);

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
        Box::pin(self.bounded("setup", None, async move {
            self.ready("setup").await?;
            with_transient_retry(MAX_POOL_CONNECTIONS, D::classify, || {
                D::Db::set_up(
                    &self.cx.target.pool,
                    self.shared_sql.setup_done.as_deref(),
                    &self.shared_sql.setup,
                )
            })
            .await
            .map_err(|e| self.cx.err("setup", e))
        }))
    }

    fn check_message(&self, message: &NewMessage) -> Result<()> {
        D::check_message(&self.cx, message)
    }

    fn insert(&self, messages: Vec<NewMessage>) -> BoxFuture<'_, Result<Vec<String>>> {
        // The send wakes the queue for its due messages; the soonest delayed one is expected.
        let soonest = messages
            .iter()
            .map(|m| m.delay_ms)
            .filter(|&delay| delay > 0.0)
            .fold(f64::INFINITY, f64::min);
        Box::pin(self.bounded("send", Some("the messages"), async move {
            self.ready("send").await?;
            if let Some(ids) = self.hand_off(&messages).await? {
                return Ok(ids);
            }
            let ids = D::insert(&self.cx, messages).await?;
            self.expect_due(soonest);
            Ok(ids)
        }))
    }

    fn claim(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(self.bounded("claim", None, async move {
            self.ready("claim").await?;
            with_transient_retry(MAX_POOL_CONNECTIONS, D::classify, || self.claim_once(limit))
                .await
                .map_err(|e| self.cx.err("claim", e))
        }))
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
                    .bounded("ack", None, async {
                        with_transient_retry(MAX_POOL_CONNECTIONS, D::classify, || {
                            self.delete_rows(&sql)
                        })
                        .await
                        .map_err(|e| self.cx.err("ack", e))
                    })
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
            let copied = self
                .bounded("reject", None, async {
                    with_transient_retry(MAX_POOL_CONNECTIONS, D::classify, || {
                        D::redeliver(&self.cx, id, held.token, &copy)
                    })
                    .await
                    .map_err(|e| self.cx.err("reject", e))
                })
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
            self.bounded("release", None, async {
                with_transient_retry(MAX_POOL_CONNECTIONS, D::classify, || {
                    D::release(&self.cx, condition.clone())
                })
                .await
                .map_err(|e| self.cx.err("release", e))
            })
            .await
        })
    }

    fn list(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>> {
        Box::pin(async move {
            let params = [Param::Text(&self.cx.config.queue), Param::Int(limit.into())];
            self.bounded("list", None, async {
                self.ready("list").await?;
                D::Db::fetch_messages(self.cx.target.runner(), &self.shared_sql.list, &params)
                    .await
                    .map_err(|e| self.cx.err("list", e))
            })
            .await
        })
    }

    fn find(&self, id: String) -> BoxFuture<'_, Result<Option<StoredMessage>>> {
        Box::pin(async move {
            let Some(id) = row_id(&id) else {
                return Ok(None);
            };
            self.bounded("find", None, async {
                self.ready("find").await?;
                D::Db::fetch_message(
                    self.cx.target.runner(),
                    &self.shared_sql.find,
                    &[Param::Int(id)],
                )
                .await
                .map_err(|e| self.cx.err("find", e))
            })
            .await
        })
    }

    fn count(&self) -> BoxFuture<'_, Result<i64>> {
        Box::pin(async move {
            let params = self.queue_and_lease();
            self.bounded("count", None, async {
                self.ready("count").await?;
                D::Db::fetch_count(self.cx.target.runner(), &self.shared_sql.count, &params)
                    .await
                    .map_err(|e| self.cx.err("count", e))
            })
            .await
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // A last chance for rows a lost claim took, within a short bound: a server that
            // is still away leaves them to their lease.
            let _ = tokio::time::timeout(SHUTDOWN_RELEASE_BOUND, self.release_in_doubt()).await;
            self.cx.target.leave().await
        })
    }
}
