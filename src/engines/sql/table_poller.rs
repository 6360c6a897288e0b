//! One poll per (connection target, table) for the idle consumers of a dialect without push
//! wake-ups (MySQL/MariaDB, SQLite; PostgreSQL while NOTIFY does not wake them). Each idle
//! consumer registers its queue here instead of polling on its own; one task per table runs a
//! single statement per interval that answers for every registered queue (when its next row
//! is due), wakes the queues with rows due now, and keeps a timer for the rest (delayed
//! messages, leases of claims that may lapse). Idle cost is then one statement per table and
//! interval, whatever the number of queues.
//!
//! The task exists only while some consumer of the table idles; a failed poll wakes every
//! registered consumer, so that each meets the failure in its own claim and rides it out as
//! usual instead of waiting on a poll that cannot answer. So does a poll that has not
//! answered within [`stale_after`] the interval: the task wakes them once per that window
//! while it waits, so an idle consumer keeps no timer of its own (with hundreds of idle
//! queues, their timers were most of a process's idle CPU).
//!
//! Owns the plan (who idles on which table, when each queue is due) and the poll task. It
//! knows its connection target only as a [`PollTarget`] (which `super::target` implements),
//! and imports nothing of the SQL engine but the driver's [`DueRow`].

use super::driver::{DueRow, SqlResult};
use crate::queue::wake::WakeBoard;
use futures_util::future::BoxFuture;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Added to every due time: the stored times have millisecond precision (and MySQL's may be
/// rounded up), so a wake-up at the exact instant could come a fraction early and find nothing.
const DUE_MARGIN: Duration = Duration::from_millis(2);

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
    /// Ends every poll task when the target closes.
    pub stop: CancellationToken,
}

impl TablePollers {
    fn poller(&self, table: &str) -> Arc<TablePoller> {
        let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        tables
            .entry(table.to_owned())
            .or_insert_with(|| Arc::new(TablePoller::new(table)))
            .clone()
    }

    /// Polls run so far for the idle consumers of `table`.
    pub fn polls(&self, table: &str) -> u64 {
        let tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        tables
            .get(table)
            .map_or(0, |p| p.polls.load(Ordering::Relaxed))
    }

    /// A row of `queue` stored by this process becomes due at `at`: its idle consumers are
    /// woken then, without waiting for the next poll to see it.
    pub fn expect(&self, table: &str, queue: &str, at: Instant) {
        let tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(poller) = tables.get(table) {
            poller.expect(queue, at + DUE_MARGIN);
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

#[derive(Default)]
struct PollState {
    watchers: HashMap<u64, IdleQueue>,
    next_id: u64,
    /// What the watchers ask the poll for, built again only when one comes or goes.
    plan: Option<Arc<Plan>>,
    /// A task is running (set and cleared under the lock, so a registration never finds a
    /// task that is about to leave).
    running: bool,
    /// When a queue's next row is due, as the last poll or a send of this process said.
    due: HashMap<String, Instant>,
    /// When a poll last answered.
    answered_at: Option<Instant>,
}

/// The registered queues, as every poll asks for them until a registration changes: each with
/// the shortest lease any of its consumers gave, and their names as the poll's parameter.
struct Plan {
    leases: HashMap<String, Duration>,
    /// A JSON array of the names, sorted.
    names: String,
}

impl Plan {
    fn of(watchers: &HashMap<u64, IdleQueue>) -> Self {
        let mut leases: HashMap<String, Duration> = HashMap::new();
        for w in watchers.values() {
            leases
                .entry(w.queue.clone())
                .and_modify(|lease| *lease = (*lease).min(w.lease))
                .or_insert(w.lease);
        }
        let mut sorted: Vec<&str> = leases.keys().map(String::as_str).collect();
        sorted.sort_unstable();
        // A list of strings always serializes; the fallback is the empty list.
        let names = serde_json::to_string(&sorted).unwrap_or_else(|_| "[]".to_owned());
        Self { leases, names }
    }
}

impl PollState {
    fn register(&mut self, idle: IdleQueue) -> u64 {
        self.next_id += 1;
        self.watchers.insert(self.next_id, idle);
        self.plan = None;
        self.next_id
    }

    fn unregister(&mut self, id: u64) {
        if self.watchers.remove(&id).is_some() {
            self.plan = None;
        }
    }

    fn plan(&mut self) -> Arc<Plan> {
        self.plan
            .get_or_insert_with(|| Arc::new(Plan::of(&self.watchers)))
            .clone()
    }

    /// The registered queues' names.
    fn queue_names(&mut self) -> Vec<String> {
        self.plan().leases.keys().cloned().collect()
    }

    fn interval(&self) -> Option<Duration> {
        self.watchers.values().map(|w| w.interval).min()
    }

    fn note_due(&mut self, queue: &str, at: Instant) {
        self.due
            .entry(queue.to_owned())
            .and_modify(|due| *due = (*due).min(at))
            .or_insert(at);
    }

    /// Takes the queues due by `now`.
    fn take_due(&mut self, now: Instant) -> Vec<String> {
        let due: Vec<String> = self
            .due
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(queue, _)| queue.clone())
            .collect();
        for queue in &due {
            self.due.remove(queue);
        }
        due
    }

    /// Applies the answer to a poll made for `plan`, read at `answered`: returns the queues
    /// due now and notes when the others will be. A row under a name the plan did not ask for
    /// (a server collation that matched it to one, say `Orders` for `orders`) counts for every
    /// queue of the plan, so that no consumer misses a row its claim would take. A queue that
    /// left during the poll is woken for nothing at worst.
    fn apply(&mut self, plan: &Plan, rows: &[DueRow], answered: Instant) -> Vec<String> {
        let queues = &plan.leases;
        let mut now = Vec::new();
        for row in rows {
            let targets: Vec<(&String, &Duration)> = match queues.get_key_value(&row.queue) {
                Some(hit) => vec![hit],
                None => queues.iter().collect(),
            };
            for (queue, lease) in targets {
                let Some(in_ms) = due_in_ms(row, *lease) else {
                    continue;
                };
                if in_ms <= 0.0 {
                    now.push(queue.clone());
                } else {
                    self.note_due(
                        queue,
                        answered + crate::support::durations::millis(in_ms) + DUE_MARGIN,
                    );
                }
            }
        }
        now.sort();
        now.dedup();
        for queue in &now {
            self.due.remove(queue);
        }
        now
    }
}

/// Milliseconds until a row of the queue is claimable (≤ 0: now), `None` if it has none: an
/// unclaimed row at its `available_at`, a claimed one when its lease runs out.
fn due_in_ms(row: &DueRow, lease: Duration) -> Option<f64> {
    let held = row.held_ms.map(|ms| ms + lease.as_secs_f64() * 1000.0);
    match (row.free_ms, held) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
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
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn expect(&self, queue: &str, at: Instant) {
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
async fn run<T: PollTarget>(target: Weak<T>, poller: Arc<TablePoller>, stop: CancellationToken) {
    let started = Instant::now();
    let mut next_poll = started;
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
            poll_once(target.as_ref(), &poller, started, stale_after(interval)).await;
            next_poll = Instant::now() + interval;
            continue;
        }
        let until = next_due.map_or(next_poll, |due| due.min(next_poll));
        tokio::select! {
            _ = tokio::time::sleep_until(until.into()) => {}
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

#[cfg(test)]
mod tests {
    use super::*;

    fn idle(queue: &str, lease_s: u64) -> IdleQueue {
        IdleQueue {
            queue: queue.to_owned(),
            interval: Duration::from_millis(100),
            lease: Duration::from_secs(lease_s),
        }
    }

    fn row(queue: &str, free_ms: Option<f64>, held_ms: Option<f64>) -> DueRow {
        DueRow {
            queue: queue.to_owned(),
            free_ms,
            held_ms,
        }
    }

    fn state_of(watchers: &[IdleQueue]) -> PollState {
        let mut state = PollState::default();
        for w in watchers {
            state.register(w.clone());
        }
        state
    }

    #[test]
    fn wakes_the_queues_with_rows_due_and_schedules_the_others() {
        let mut state = state_of(&[idle("a", 60), idle("b", 60), idle("c", 60)]);
        let answered = Instant::now();
        let plan = state.plan();
        let now = state.apply(
            &plan,
            &[row("a", Some(-5.0), None), row("b", Some(2000.0), None)],
            answered,
        );
        assert_eq!(now, vec!["a".to_owned()]);
        assert_eq!(
            state.due.get("b"),
            Some(&(answered + Duration::from_millis(2000) + DUE_MARGIN))
        );
        assert!(!state.due.contains_key("c"));
        assert_eq!(
            state.take_due(answered + Duration::from_secs(3)),
            vec!["b".to_owned()]
        );
        assert!(state.due.is_empty());
    }

    #[test]
    fn a_claimed_row_is_due_when_its_lease_runs_out() {
        let mut state = state_of(&[idle("a", 10), idle("b", 10)]);
        let answered = Instant::now();
        // Claimed 11 s ago with a 10 s lease: lapsed. Claimed 4 s ago: due in 6 s.
        let plan = state.plan();
        let now = state.apply(
            &plan,
            &[
                row("a", None, Some(-11_000.0)),
                row("b", None, Some(-4_000.0)),
            ],
            answered,
        );
        assert_eq!(now, vec!["a".to_owned()]);
        assert_eq!(
            state.due.get("b"),
            Some(&(answered + Duration::from_millis(6000) + DUE_MARGIN))
        );
    }

    #[test]
    fn a_row_under_an_unregistered_name_counts_for_every_queue() {
        let mut state = state_of(&[idle("Orders", 60), idle("mail", 60)]);
        let plan = state.plan();
        let now = state.apply(&plan, &[row("orders", Some(0.0), None)], Instant::now());
        assert_eq!(now, vec!["Orders".to_owned(), "mail".to_owned()]);
    }

    #[test]
    fn the_shortest_interval_and_lease_win() {
        let mut fast = idle("a", 5);
        fast.interval = Duration::from_millis(20);
        let mut state = state_of(&[idle("a", 60), fast]);
        assert_eq!(state.interval(), Some(Duration::from_millis(20)));
        assert_eq!(state.plan().leases.get("a"), Some(&Duration::from_secs(5)));
    }

    #[test]
    fn the_plan_is_built_again_only_when_a_consumer_comes_or_goes() {
        let mut state = state_of(&[idle("b", 60), idle("a", 60), idle("it's \"é\"", 60)]);
        let first = state.plan();
        assert_eq!(first.names, r#"["a","b","it's \"é\""]"#);
        assert!(Arc::ptr_eq(&first, &state.plan()));
        let id = state.register(idle("c", 60));
        assert_eq!(state.plan().names, r#"["a","b","c","it's \"é\""]"#);
        state.unregister(id);
        assert_eq!(state.plan().names, first.names);
        assert!(!Arc::ptr_eq(&first, &state.plan()));
    }

    #[test]
    fn an_earlier_expectation_is_kept() {
        let mut state = PollState::default();
        let t = Instant::now();
        state.note_due("a", t + Duration::from_secs(5));
        state.note_due("a", t + Duration::from_secs(1));
        state.note_due("a", t + Duration::from_secs(3));
        assert_eq!(state.due.get("a"), Some(&(t + Duration::from_secs(1))));
    }
}
