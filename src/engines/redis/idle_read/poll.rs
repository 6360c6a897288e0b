//! The poll beside the idle consumers' shared read (or a cluster's key tracking): what no new
//! entry announces, a delayed member come due, a stalled entry to reclaim, a stream or group
//! gone, found for every idle consumer of the deployment by one script per `pollIntervalMs`
//! (on a cluster one per slot), which wakes those that have any.

use super::{Conn, IdleRead};
use crate::engines::redis::slot::slot;
use redis::{Script, ScriptInvocation};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

static IDLE_DUE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/idle_due.lua")));

/// How often the poll looks whether an idle consumer's stream and group still exist, whatever
/// `pollIntervalMs` (also the longest between two polls): one deleted under an idle consumer
/// is found so (a blocked XREADGROUP was told at once; the shared XREAD is not), and its
/// consumer's get() fails as it did then.
const VANISHED_WITHIN: Duration = Duration::from_secs(1);

impl IdleRead {
    /// Every `pollIntervalMs` (the shortest of the idle consumers', `VANISHED_WITHIN` at
    /// most), one script looks for due delayed members, stalled entries and vanished groups of
    /// every idle consumer, and wakes those that have any; on a cluster one script per slot,
    /// the slots at once, and no look at the delayed zsets: their changes are announced to the
    /// tracking, which wakes the consumers, and a member coming due is waited for by its
    /// consumer, which learnt its due time from its claim. A failed poll is not retried early:
    /// the next one looks again.
    pub(super) async fn poll_loop(self: Arc<Self>, mut commands: Conn, cluster: bool) {
        let mut vanish_next = Instant::now() + VANISHED_WITHIN;
        // The EXISTS over the idle consumers' delayed zsets, as of `State::changes`.
        let mut exists: Option<(u64, redis::Cmd)> = None;
        loop {
            let seen = self.plan.seq();
            if self.closing.is_cancelled() {
                return;
            }
            let poll = self
                .state()
                .watched
                .values()
                .map(|w| w.poll.min(VANISHED_WITHIN))
                .min()
                .map(|poll| poll.max(Duration::from_millis(1)));
            let Some(poll) = poll else {
                self.plan.changed(seen).await;
                continue;
            };
            tokio::select! {
                _ = tokio::time::sleep(poll) => {}
                _ = self.closing.cancelled() => return,
            }
            let now = Instant::now();
            // On a cluster a deleted stream is announced to the tracking, and a destroyed
            // group found by the check for stalled entries (each `reclaim_period`, 5 s at most):
            // a look each second would cost a script per slot.
            let vanish_check = !cluster && now >= vanish_next;
            if vanish_check {
                vanish_next = now + VANISHED_WITHIN;
            }
            let any_delayed = !cluster && self.any_delayed(&mut exists, &mut commands).await;
            let checks = self.due_checks(now, any_delayed, vanish_check, cluster);
            if checks.is_empty() {
                continue;
            }
            if cluster {
                self.polls.fetch_add(1, Ordering::Relaxed);
            }
            let answers = checks.into_iter().map(|(keys, script)| {
                let mut commands = commands.clone();
                async move {
                    let due = script.invoke_async::<Vec<usize>>(&mut commands).await;
                    (keys, due)
                }
            });
            for (keys, due) in futures_util::future::join_all(answers).await {
                let Ok(due) = due else {
                    continue;
                };
                let mut state = self.state();
                for (i, key) in keys.iter().enumerate() {
                    let Some(watched) = state.watched.get_mut(key) else {
                        continue;
                    };
                    if due.contains(&(i + 1)) {
                        watched.signal.wake();
                        continue;
                    }
                    if watched.reclaim_at <= now {
                        watched.reclaim_at = now + watched.reclaim_period;
                    }
                }
            }
        }
    }

    /// The idle consumers a poll looks at (all with `any_delayed`, else those with a check
    /// due), as `scripts/idle_due.lua` invocations with the consumers each answers for: one
    /// in all, or on a cluster one per slot.
    fn due_checks(
        &self,
        now: Instant,
        any_delayed: bool,
        vanish_check: bool,
        cluster: bool,
    ) -> Vec<(Vec<u64>, ScriptInvocation<'static>)> {
        let state = self.state();
        let mut checks: BTreeMap<u16, (Vec<u64>, ScriptInvocation<'static>)> = BTreeMap::new();
        for (key, watched) in &state.watched {
            let reclaim = watched.reclaim_at <= now;
            if !(any_delayed || vanish_check || reclaim) {
                continue;
            }
            let group = if cluster { slot(&watched.stream) } else { 0 };
            let (keys, script) = checks
                .entry(group)
                .or_insert_with(|| (Vec::new(), IDLE_DUE.prepare_invoke()));
            keys.push(*key);
            script
                .key(&watched.delay_key)
                .key(&watched.stream)
                .arg(&watched.group);
            if reclaim {
                script.arg(watched.claim_idle.as_millis() as u64);
            } else if vanish_check {
                script.arg("-");
            } else {
                script.arg("");
            }
        }
        checks.into_values().collect()
    }

    /// Whether any idle consumer's delayed zset exists (empty zsets do not): one `EXISTS`
    /// over them all, remade when consumers come or go (`State::changes`). While none does,
    /// the consumers to look at are those with a check due (none, most of the time: this is
    /// then the whole poll). A failed `EXISTS` counts as some.
    async fn any_delayed(
        &self,
        exists: &mut Option<(u64, redis::Cmd)>,
        commands: &mut Conn,
    ) -> bool {
        let cmd = {
            let state = self.state();
            match exists {
                Some((made, cmd)) if *made == state.changes => &*cmd,
                _ => {
                    let zsets: BTreeSet<&String> =
                        state.watched.values().map(|w| &w.delay_key).collect();
                    let mut cmd = redis::cmd("EXISTS");
                    cmd.arg(zsets.into_iter().collect::<Vec<_>>());
                    &exists.insert((state.changes, cmd)).1
                }
            }
        };
        self.polls.fetch_add(1, Ordering::Relaxed);
        let delayed: redis::RedisResult<i64> = cmd.query_async(commands).await;
        !matches!(delayed, Ok(0))
    }
}
