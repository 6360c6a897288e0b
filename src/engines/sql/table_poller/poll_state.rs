//! What a table's poll answers for (see the parent module): the idle consumers registered on
//! the table, the plan every poll asks for (their queues, each with its shortest lease), and
//! when each queue's next row is due, as polls and this process's sends said.

use super::{IdleQueue, DUE_MARGIN};
use crate::engines::sql::driver::DueRow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Default)]
pub(super) struct PollState {
    pub(super) watchers: HashMap<u64, IdleQueue>,
    pub(super) next_id: u64,
    /// What the watchers ask the poll for, built again only when one comes or goes.
    pub(super) plan: Option<Arc<Plan>>,
    /// A task is running (set and cleared under the lock, so a registration never finds a
    /// task that is about to leave).
    pub(super) running: bool,
    /// When a queue's next row is due, as the last poll or a send of this process said.
    pub(super) due: HashMap<String, Instant>,
    /// When a poll last answered.
    pub(super) answered_at: Option<Instant>,
}

/// The registered queues, as every poll asks for them until a registration changes: each with
/// the shortest lease any of its consumers gave, and their names as the poll's parameter.
pub(super) struct Plan {
    pub(super) leases: HashMap<String, Duration>,
    /// A JSON array of the names, sorted.
    pub(super) names: String,
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
    pub(super) fn register(&mut self, idle: IdleQueue) -> u64 {
        self.next_id += 1;
        self.watchers.insert(self.next_id, idle);
        self.plan = None;
        self.next_id
    }

    pub(super) fn unregister(&mut self, id: u64) {
        if self.watchers.remove(&id).is_some() {
            self.plan = None;
        }
    }

    pub(super) fn plan(&mut self) -> Arc<Plan> {
        self.plan
            .get_or_insert_with(|| Arc::new(Plan::of(&self.watchers)))
            .clone()
    }

    /// The registered queues' names.
    pub(super) fn queue_names(&mut self) -> Vec<String> {
        self.plan().leases.keys().cloned().collect()
    }

    pub(super) fn interval(&self) -> Option<Duration> {
        self.watchers.values().map(|w| w.interval).min()
    }

    pub(super) fn note_due(&mut self, queue: &str, at: Instant) {
        self.due
            .entry(queue.to_owned())
            .and_modify(|due| *due = (*due).min(at))
            .or_insert(at);
    }

    /// Takes the queues due by `now`.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<String> {
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
    pub(super) fn apply(&mut self, plan: &Plan, rows: &[DueRow], answered: Instant) -> Vec<String> {
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
