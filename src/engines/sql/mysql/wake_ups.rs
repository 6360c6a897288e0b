//! Wake-ups across processes on MySQL/MariaDB, which has no LISTEN/NOTIFY. While consumers of
//! a target idle, one connection of the process waits in `SELECT SLEEP(…)`, tagged so that it
//! can be found in the server's process list. A sender of another process, once its insert
//! has committed, ends those waits with `KILL QUERY <id>`: the sleeper returns, and the
//! target's table polls run at once. Only the same user's connections are listed and may be
//! ended, so no privilege beyond the table's is needed; where the sleepers cannot be found or
//! ended (another user, a sender that only inserts, such as the TypeScript transport) the
//! polls keep their interval, as they do when a wake-up races a sleeper between two waits.
//!
//! The sender side keeps the sleepers it found (looked for again at most once a second while
//! it sends), and ends them on the send's own connection right after its insert: one more
//! statement per batch and sleeper, none while no other process idles. An end that meets a
//! sleeper between two sleeps ends nothing (`KILL QUERY` on an idle connection is a no-op):
//! the poll finds that message.

use crate::queue::wake::WakeSignal;
use crate::support::locks::Locked;
use sqlx::mysql::{MySqlConnection, MySqlPool};
use sqlx::{Executor, Row};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// In the sleeper's statement, so that senders find it in the process list.
const TAG: &str = "nestjs-messenger-native idle wait";
/// How long one wait lasts before it is made again (the statement shows a live sleeper).
const SLEEP_SECONDS: u32 = 30;
/// How long the sender trusts the sleepers it found.
const REFRESH: Duration = Duration::from_secs(1);
/// How long the sleeper stays after the last consumer idled.
const LINGER: Duration = Duration::from_secs(60);
/// How long the sleeper waits before trying again after its connection failed.
const RETRY: Duration = Duration::from_secs(1);
/// MySQL's and MariaDB's "Query execution was interrupted" (ER_QUERY_INTERRUPTED): how
/// MariaDB's sleep ends on `KILL QUERY` (MySQL's returns 1).
const INTERRUPTED: u16 = 1317;
/// How long a sender's look for sleepers, or an end of one, may take.
const WAKE_BOUND: Duration = Duration::from_secs(2);

pub struct WakeUps {
    /// Moved when a sleeper of this process is woken: the target's table polls run at once.
    changed: Arc<WakeSignal>,
    /// The sleeper's connection id (0: none), which this process's senders leave alone.
    own_sleeper: AtomicU64,
    sleeping: AtomicBool,
    last_idle: Mutex<Option<Instant>>,
    stop: CancellationToken,
    /// The other processes' sleepers, as last found, and when.
    sleepers: Mutex<(Vec<u64>, Option<Instant>)>,
}

impl WakeUps {
    pub fn new(changed: Arc<WakeSignal>) -> Arc<Self> {
        Arc::new(Self {
            changed,
            own_sleeper: AtomicU64::new(0),
            sleeping: AtomicBool::new(false),
            last_idle: Mutex::new(None),
            stop: CancellationToken::new(),
            sleepers: Mutex::new((Vec::new(), None)),
        })
    }

    /// A consumer of the target idles: the sleeper runs (started if it is not), on a
    /// connection of `pool`.
    pub fn idles(self: &Arc<Self>, pool: &MySqlPool) {
        *self.last_idle.locked() = Some(Instant::now());
        if self.stop.is_cancelled() || self.sleeping.swap(true, Ordering::AcqRel) {
            return;
        }
        tokio::spawn(self.clone().sleep_loop(pool.clone()));
    }

    /// Ends the sleeper (the target closes).
    pub fn close(&self) {
        self.stop.cancel();
    }

    /// An insert of this process committed on `conn` (the send's own connection, before it
    /// is kept for the next send): the other processes' sleepers are ended there, found first
    /// when the last look is a second old. Each statement is bounded; an error says the
    /// connection is not to be kept (the insert stands).
    pub async fn wake_others(&self, conn: &mut MySqlConnection) -> Result<(), sqlx::Error> {
        let stale = self
            .sleepers
            .locked()
            .1
            .is_none_or(|at| at.elapsed() >= REFRESH);
        if stale {
            let found = bounded(find_sleepers(conn)).await;
            let own = self.own_sleeper.load(Ordering::Relaxed);
            let mut sleepers = self.sleepers.locked();
            sleepers.1 = Some(Instant::now());
            let mut ids = found?;
            ids.retain(|id| *id != own);
            sleepers.0 = ids;
        }
        let ids = self.sleepers.locked().0.clone();
        for id in ids {
            match bounded(conn.execute(format!("KILL QUERY {id}").as_str())).await {
                // A sleeper gone meanwhile (unknown thread): only not there to wake.
                Ok(_) | Err(sqlx::Error::Database(_)) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    fn sleep_loop(
        self: Arc<Self>,
        pool: MySqlPool,
    ) -> futures_util::future::BoxFuture<'static, ()> {
        Box::pin(self.sleep_loop_once(pool))
    }

    /// The sleeper's loop; when it ends just as a consumer idles, it starts again.
    async fn sleep_loop_once(self: Arc<Self>, pool: MySqlPool) {
        let sleep = format!("SELECT SLEEP({SLEEP_SECONDS}) /* {TAG} */");
        while !self.stop.is_cancelled() && self.wanted() {
            let Ok(mut conn) = pool.acquire().await else {
                self.pause().await;
                continue;
            };
            // Never back in the pool with a sleep running on it (an end cancels it midway).
            conn.close_on_drop();
            let id = match conn.fetch_one("SELECT CONNECTION_ID()").await {
                Ok(row) => id_of(&row).unwrap_or(0),
                Err(_) => {
                    self.pause().await;
                    continue;
                }
            };
            self.own_sleeper.store(id, Ordering::Relaxed);
            while self.wanted() {
                let slept = tokio::select! {
                    slept = conn.fetch_one(sleep.as_str()) => slept,
                    () = self.stop.cancelled() => break,
                };
                match slept {
                    // 1: ended early by a sender; 0: the whole sleep passed.
                    Ok(row) if row.try_get::<i64, _>(0).unwrap_or(1) != 0 => self.changed.wake(),
                    Ok(_) => {}
                    Err(sqlx::Error::Database(db)) if interrupted(db.as_ref()) => {
                        self.changed.wake()
                    }
                    Err(_) => {
                        self.pause().await;
                        break;
                    }
                }
            }
            self.own_sleeper.store(0, Ordering::Relaxed);
        }
        self.sleeping.store(false, Ordering::Release);
        // A consumer that idled as the loop ended starts it again.
        if self.wanted() && !self.stop.is_cancelled() && !self.sleeping.swap(true, Ordering::AcqRel)
        {
            tokio::spawn(self.clone().sleep_loop(pool));
        }
    }

    /// Whether a consumer idled lately.
    fn wanted(&self) -> bool {
        self.last_idle
            .locked()
            .is_some_and(|at| at.elapsed() < LINGER)
    }

    async fn pause(&self) {
        tokio::select! {
            () = tokio::time::sleep(RETRY) => {}
            () = self.stop.cancelled() => {}
        }
    }
}

/// The same user's sleepers on the server, in this database (the pattern matches the
/// sleeper's statement, not this one).
async fn find_sleepers(conn: &mut MySqlConnection) -> Result<Vec<u64>, sqlx::Error> {
    let find = format!(
        "SELECT ID FROM information_schema.PROCESSLIST \
         WHERE DB <=> DATABASE() AND INFO LIKE 'SELECT SLEEP(%) /* {TAG} */'"
    );
    let rows = conn.fetch_all(find.as_str()).await?;
    Ok(rows.iter().filter_map(id_of).collect())
}

/// `work` within [`WAKE_BOUND`] (a silent server must not hold the send that woke it).
async fn bounded<T>(
    work: impl std::future::Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, sqlx::Error> {
    tokio::time::timeout(WAKE_BOUND, work)
        .await
        .unwrap_or(Err(sqlx::Error::PoolTimedOut))
}

fn interrupted(db: &dyn sqlx::error::DatabaseError) -> bool {
    db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
        .is_some_and(|e| e.number() == INTERRUPTED)
}

/// A connection id, whichever integer type the server gives it.
fn id_of(row: &sqlx::mysql::MySqlRow) -> Option<u64> {
    row.try_get::<u64, _>(0).ok().or_else(|| {
        row.try_get::<i64, _>(0)
            .ok()
            .and_then(|id| u64::try_from(id).ok())
    })
}
