//! One poll per (connection target, table) for the idle consumers of a dialect without push
//! wake-ups (MySQL/MariaDB, SQLite; PostgreSQL while NOTIFY does not wake them). Each idle
//! consumer registers its queue here instead of polling on its own; one task per table runs a
//! single statement per interval that answers for every registered queue (when its next row
//! is due), wakes the queues with rows due now, and keeps a timer for the rest (delayed
//! messages, leases of claims that may lapse). Idle cost is then one statement per table and
//! interval, whatever the number of queues.
//!
//! Where the database can tell that another process changed it (a SQLite file's writes, a
//! MySQL/MariaDB sender's wake-up), the target moves [`TablePollers::changed_elsewhere`]: every
//! table's task then polls at once instead of at its next interval.
//!
//! The task exists only while some consumer of the table idles; a failed poll wakes every
//! registered consumer, so that each meets the failure in its own claim and rides it out as
//! usual instead of waiting on a poll that cannot answer. So does a poll that has not
//! answered within [`stale_after`] the interval: the task wakes them once per that window
//! while it waits, so an idle consumer keeps no timer of its own (with hundreds of idle
//! queues, their timers were most of a process's idle CPU).
//!
//! Owns the registrations and the poll task; what a poll answers for (who idles on the
//! table, when each queue is due) is `poll_state`. It knows its connection target only as a
//! [`PollTarget`] (which `super::target` implements), and imports nothing of the SQL engine
//! but the driver's [`DueRow`].

use super::driver::{DueRow, SqlResult};
use crate::queue::wake::{WakeBoard, WakeSignal};
use crate::support::locks::Locked;
use futures_util::future::BoxFuture;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

mod poll_state;
use poll_state::PollState;

/// Added to every due time: the stored times have millisecond precision (and MySQL's may be
/// rounded up), so a wake-up at the exact instant could come a fraction early and find nothing.
pub(super) const DUE_MARGIN: Duration = Duration::from_millis(2);

/// How long a table's consumers trust its poll without an answer: ten intervals, within
/// [`MIN_STALE_AFTER`] and [`MAX_STALE_AFTER`], and never less than two. Past it, they claim
/// on their own until the poll answers again.
pub fn stale_after(interval: Duration) -> Duration {
    (interval * 10)
        .clamp(MIN_STALE_AFTER, MAX_STALE_AFTER)
        .max(interval * 2)
}

const MIN_STALE_AFTER: Duration = Duration::from_secs(1);
/// Also how long an idle consumer waits without a wake-up before it checks that the poll
/// still answers: the poll task's own wake-ups cannot reach it once the task is gone.
pub const MAX_STALE_AFTER: Duration = Duration::from_secs(30);

/// What one idle consumer asked for: its queue, its poll interval and its claims' lease.
#[derive(Debug, Clone)]
pub struct IdleQueue {
    pub queue: String,
    pub interval: Duration,
    pub lease: Duration,
}

/// What a table's poll task needs of its connection target.
pub trait PollTarget: Send + Sync + 'static {
    /// The target's pollers, by table.
    fn pollers(&self) -> &TablePollers;
    /// Where the target's idle consumers wait.
    fn board(&self) -> &WakeBoard;
    /// Runs the table's one statement (one attempt): for each queue `names` lists (a JSON
    /// array) that has rows in `table`, when its next row is due.
    fn fetch_due<'a>(
        &'a self,
        table: &'a str,
        names: &'a str,
    ) -> BoxFuture<'a, SqlResult<Vec<DueRow>>>;
    /// How long a poll may take before it counts as failed.
    fn poll_bound(&self) -> Duration;
    /// Hears that a poll failed (a failure may make pooled connections suspect).
    fn poll_failed(&self, err: &sqlx::Error);
}

/// The table pollers of one target, by table.
#[derive(Default)]
pub struct TablePollers {
    tables: Mutex<HashMap<String, Arc<TablePoller>>>,
    /// Moved when another process may have changed the tables: every poll task polls at once.
    pub changed_elsewhere: Arc<WakeSignal>,
    /// Ends every poll task when the target closes.
    pub stop: CancellationToken,
}

impl TablePollers {
    /// Pollers whose tasks poll at once when `changed_elsewhere` moves.
    pub fn following(changed_elsewhere: Arc<WakeSignal>) -> Self {
        Self {
            changed_elsewhere,
            ..Self::default()
        }
    }

    fn poller(&self, table: &str) -> Arc<TablePoller> {
        let mut tables = self.tables.locked();
        tables
            .entry(table.to_owned())
            .or_insert_with(|| Arc::new(TablePoller::new(table)))
            .clone()
    }

    /// Polls run so far for the idle consumers of `table`.
    pub fn polls(&self, table: &str) -> u64 {
        let tables = self.tables.locked();
        tables
            .get(table)
            .map_or(0, |p| p.polls.load(Ordering::Relaxed))
    }

    /// A row of `queue` stored by this process becomes due at `at`: its idle consumers are
    /// woken then, without waiting for the next poll to see it.
    pub fn wake_when_due(&self, table: &str, queue: &str, at: Instant) {
        let tables = self.tables.locked();
        if let Some(poller) = tables.get(table) {
            poller.wake_when_due(queue, at + DUE_MARGIN);
        }
    }
}

/// Registers an idle consumer of `table` with the target's poller (starting the poller's task
/// if it is not running) until the returned watch is dropped.
pub fn watch<T: PollTarget>(target: &Arc<T>, table: &str, idle: IdleQueue) -> IdleWatch {
    let poller = target.pollers().poller(table);
    let (id, start, shorter) = {
        let mut state = poller.lock();
        let shorter = state.interval().is_some_and(|i| idle.interval < i);
        let id = state.register(idle);
        let start = !state.running;
        state.running = true;
        (id, start, shorter)
    };
    if start {
        tokio::spawn(run(
            Arc::downgrade(target),
            poller.clone(),
            target.pollers().changed_elsewhere.clone(),
            target.pollers().stop.clone(),
        ));
    } else if shorter {
        poller.changed.notify_one();
    }
    IdleWatch { poller, id }
}

/// An idle consumer's registration; dropping it ends it.
pub struct IdleWatch {
    poller: Arc<TablePoller>,
    id: u64,
}

impl IdleWatch {
    /// Whether the table's poll answered within `window`: while it does, a consumer needs no
    /// statement of its own to learn that nothing is due.
    pub fn fresh(&self, window: Duration) -> bool {
        self.poller
            .lock()
            .answered_at
            .is_some_and(|at| at.elapsed() <= window)
    }
}

impl Drop for IdleWatch {
    fn drop(&mut self) {
        self.poller.lock().unregister(self.id);
    }
}

pub struct TablePoller {
    table: String,
    state: Mutex<PollState>,
    /// A registration or an expected due time changed the plan.
    changed: Notify,
    polls: AtomicU64,
}

impl TablePoller {
    fn new(table: &str) -> Self {
        Self {
            table: table.to_owned(),
            state: Mutex::default(),
            changed: Notify::new(),
            polls: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PollState> {
        self.state.locked()
    }

    fn wake_when_due(&self, queue: &str, at: Instant) {
        self.lock().note_due(queue, at);
        self.changed.notify_one();
    }

    fn wake(&self, board: &WakeBoard, queues: &[String]) {
        for queue in queues {
            board.wake(&self.table, queue);
        }
    }
}

/// The poll task of one table: polls every interval (the shortest any registered consumer
/// asked for) while consumers idle, and wakes queues as their rows come due in between.
async fn run<T: PollTarget>(
    target: Weak<T>,
    poller: Arc<TablePoller>,
    changed_elsewhere: Arc<WakeSignal>,
    stop: CancellationToken,
) {
    let started = Instant::now();
    let mut next_poll = started;
    // A change elsewhere after this is polled for: read before each poll, so that one made
    // while it ran is not lost.
    let mut seen_elsewhere = changed_elsewhere.seq();
    loop {
        let (interval, next_due) = {
            let mut state = poller.lock();
            match state.interval() {
                Some(interval) => (interval, state.due.values().min().copied()),
                None => {
                    // A consumer that idles again later is covered by the new task's first
                    // poll, at once.
                    state.running = false;
                    state.due.clear();
                    return;
                }
            }
        };
        let now = Instant::now();
        if now >= next_poll {
            let Some(target) = target.upgrade() else {
                poller.lock().running = false;
                return;
            };
            seen_elsewhere = changed_elsewhere.seq();
            poll_once(target.as_ref(), &poller, started, stale_after(interval)).await;
            next_poll = Instant::now() + interval;
            continue;
        }
        let until = next_due.map_or(next_poll, |due| due.min(next_poll));
        tokio::select! {
            _ = tokio::time::sleep_until(until.into()) => {}
            _ = changed_elsewhere.changed(seen_elsewhere) => {
                next_poll = Instant::now();
                continue;
            }
            _ = poller.changed.notified() => {
                // A shorter interval takes effect from the last poll.
                let interval = poller.lock().interval().unwrap_or(interval);
                next_poll = next_poll.min(Instant::now() + interval);
            }
            _ = stop.cancelled() => {
                poller.lock().running = false;
                return;
            }
        }
        let due = poller.lock().take_due(Instant::now());
        if let Some(target) = target.upgrade() {
            poller.wake(target.board(), &due);
        }
    }
}

/// One statement for every registered queue; on failure every registered consumer is woken
/// to claim (and meet the failure itself). While it has no answer for `stale` past the last
/// one (or the task's start), every registered consumer is woken once per `stale`, to claim on
/// its own meanwhile.
async fn poll_once<T: PollTarget>(
    target: &T,
    poller: &TablePoller,
    started: Instant,
    stale: Duration,
) {
    let (plan, mut trusted_since) = {
        let mut state = poller.lock();
        let plan = state.plan();
        if plan.leases.is_empty() {
            return;
        }
        (
            plan,
            state.answered_at.map_or(started, |at| at.max(started)),
        )
    };
    poller.polls.fetch_add(1, Ordering::Relaxed);
    let fetch = tokio::time::timeout(
        target.poll_bound(),
        target.fetch_due(&poller.table, &plan.names),
    );
    tokio::pin!(fetch);
    let answer = loop {
        tokio::select! {
            answer = &mut fetch => break answer,
            _ = tokio::time::sleep_until((trusted_since + stale).into()) => {
                let queues = poller.lock().queue_names();
                poller.wake(target.board(), &queues);
                trusted_since = Instant::now();
            }
        }
    };
    let wake_now = {
        let mut state = poller.lock();
        match answer {
            Ok(Ok(rows)) => {
                let answered = Instant::now();
                state.answered_at = Some(answered);
                state.apply(&plan, &rows, answered)
            }
            Ok(Err(err)) => {
                target.poll_failed(&err);
                state.queue_names()
            }
            Err(_) => state.queue_names(),
        }
    };
    poller.wake(target.board(), &wake_now);
}
