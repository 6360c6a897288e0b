//! A connection kept from one statement to the next instead of handed back to the pool: a
//! draining consumer's claims keep one (on MySQL an idle consumer's polls too), its ack
//! flusher another, sends a third. sqlx pings a
//! connection on its way back (in a task of its own), so the statement right after found it
//! busy and opened another one: on PostgreSQL a backend start, and a statement planned again on
//! cold caches, so claims waited for a connection and sends went over two. Only a
//! connection whose statement completed is kept, at most one per `KeptConnection` (whichever
//! statement finds it takes it), and for at most `KEEP_FOR` between statements: one that stops
//! being used goes back to the pool soon.

use crate::support::locks::Locked;
use sqlx::pool::{Pool, PoolConnection};
use sqlx::Database;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::runtime::Handle;

/// How long a kept connection waits for its next statement before it goes back to the pool.
const KEEP_FOR: Duration = Duration::from_secs(1);

struct Slot<DB: Database> {
    kept: Option<(PoolConnection<DB>, Instant)>,
    /// A task is watching `kept` for expiry: one per kept period, not one per `keep` (the ack
    /// flusher keeps its connection hundreds of times a second).
    watched: bool,
    /// The runtime the connection was kept in, to drop it in (see the `Drop` below).
    runtime: Option<Handle>,
}

pub struct KeptConnection<DB: Database> {
    slot: Arc<Mutex<Slot<DB>>>,
}

impl<DB: Database> Default for KeptConnection<DB> {
    fn default() -> Self {
        Self {
            slot: Arc::new(Mutex::new(Slot {
                kept: None,
                watched: false,
                runtime: None,
            })),
        }
    }
}

impl<DB: Database> KeptConnection<DB> {
    /// The kept connection, or one from `pool`.
    pub async fn take(&self, pool: &Pool<DB>) -> Result<PoolConnection<DB>, sqlx::Error> {
        let kept = self.slot.locked().kept.take();
        match kept {
            Some((conn, _)) => Ok(conn),
            None => pool.acquire().await,
        }
    }

    /// Keeps `conn` for the next `take` (for at most `KEEP_FOR`), or hands it back to the
    /// pool if one is kept already. Call only in a runtime, with a connection whose last
    /// statement completed (nothing left to read, no transaction open).
    pub fn keep(&self, conn: PoolConnection<DB>) {
        let mut slot = self.slot.locked();
        if slot.kept.is_some() {
            drop(slot);
            drop(conn);
            return;
        }
        slot.kept = Some((conn, Instant::now()));
        slot.runtime.get_or_insert_with(Handle::current);
        if !std::mem::replace(&mut slot.watched, true) {
            tokio::spawn(watch(Arc::downgrade(&self.slot)));
        }
    }

    /// Hands the kept connection back to the pool (before the pool closes, which would
    /// otherwise wait for it).
    pub fn give_back(&self) {
        let kept = self.slot.locked().kept.take();
        drop(kept);
    }
}

/// A pool connection goes back to its pool in a task, so dropping one needs a runtime; a
/// queue dropped without close() is dropped on the JavaScript thread (its finalizer, at the
/// latest as the process exits), outside it: the kept connection is dropped in the runtime it
/// was kept in (a task spawned there after it shut down is dropped, never run).
impl<DB: Database> Drop for KeptConnection<DB> {
    fn drop(&mut self) {
        let kept_in = self.slot.locked().runtime.clone();
        let _entered = match (Handle::try_current(), &kept_in) {
            (Err(_), Some(runtime)) => Some(runtime.enter()),
            _ => None,
        };
        self.give_back();
    }
}

/// Hands the kept connection back once it has waited `KEEP_FOR`; ends when nothing is kept.
async fn watch<DB: Database>(slot: Weak<Mutex<Slot<DB>>>) {
    let mut wait = KEEP_FOR;
    loop {
        tokio::time::sleep(wait).await;
        let Some(slot) = slot.upgrade() else { return };
        let mut slot = slot.locked();
        let since = slot.kept.as_ref().map(|(_, at)| at.elapsed());
        match since {
            Some(since) if since < KEEP_FOR => wait = KEEP_FOR - since,
            _ => {
                slot.watched = false;
                let expired = slot.kept.take();
                drop(slot);
                drop(expired);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::sqlite::SqlitePoolOptions;
    use sqlx::{Executor, Sqlite};

    /// Each connection of an in-memory SQLite pool has a database of its own, so a table
    /// made on one tells it apart from the others.
    async fn pool() -> Pool<Sqlite> {
        SqlitePoolOptions::new()
            .max_connections(2)
            .connect("sqlite::memory:")
            .await
            .expect("an in-memory pool")
    }

    async fn is_marked(conn: &mut PoolConnection<Sqlite>) -> bool {
        conn.execute("SELECT 1 FROM marked").await.is_ok()
    }

    #[tokio::test]
    async fn the_next_take_gets_the_kept_connection_and_it_goes_back_after_keep_for() {
        let pool = pool().await;
        let kept = KeptConnection::default();
        let mut conn = kept.take(&pool).await.expect("a connection");
        conn.execute("CREATE TABLE marked (x)").await.expect("made");
        kept.keep(conn);
        assert_eq!((pool.size(), pool.num_idle()), (1, 0));

        let mut again = kept.take(&pool).await.expect("the kept one");
        assert!(is_marked(&mut again).await);
        kept.keep(again);

        tokio::time::sleep(KEEP_FOR + Duration::from_millis(200)).await;
        assert_eq!((pool.size(), pool.num_idle()), (1, 1), "back in the pool");
        let mut pooled = pool.acquire().await.expect("from the pool");
        assert!(is_marked(&mut pooled).await);
    }

    #[tokio::test]
    async fn a_connection_kept_again_waits_keep_for_from_its_last_keep() {
        let pool = pool().await;
        let kept = KeptConnection::default();
        kept.keep(pool.acquire().await.expect("a connection"));
        tokio::time::sleep(KEEP_FOR * 7 / 10).await;
        let again = kept.take(&pool).await.expect("the kept one");
        kept.keep(again);
        tokio::time::sleep(KEEP_FOR / 2).await;
        assert_eq!(pool.num_idle(), 0, "still kept past the first keep's time");
        tokio::time::sleep(KEEP_FOR * 7 / 10).await;
        assert_eq!(pool.num_idle(), 1, "back in the pool");
    }

    #[tokio::test]
    async fn keeps_one_at_most_and_gives_it_back_on_demand() {
        let pool = pool().await;
        let kept = KeptConnection::default();
        let mut first = pool.acquire().await.expect("a connection");
        first
            .execute("CREATE TABLE marked (x)")
            .await
            .expect("made");
        let second = pool.acquire().await.expect("another");
        kept.keep(first);
        kept.keep(second);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            (pool.size(), pool.num_idle()),
            (2, 1),
            "the second went back"
        );

        kept.give_back();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(pool.num_idle(), 2);
    }

    /// As a queue dropped without close() is: by a thread outside every runtime.
    #[test]
    fn dropped_outside_a_runtime_it_returns_its_connection_in_the_runtime_it_was_kept_in() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let (pool, kept) = runtime.block_on(async {
            let pool = pool().await;
            let kept = KeptConnection::default();
            kept.keep(pool.acquire().await.expect("a connection"));
            (pool, kept)
        });
        std::thread::spawn(move || drop(kept))
            .join()
            .expect("dropped without a panic");
        runtime.block_on(async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(pool.num_idle(), 1, "back in the pool");
        });

        // Its runtime shut down as well, as when the process exits: dropped all the same.
        let kept = runtime.block_on(async {
            let kept = KeptConnection::default();
            kept.keep(pool.acquire().await.expect("a connection"));
            kept
        });
        drop(runtime);
        std::thread::spawn(move || drop(kept))
            .join()
            .expect("dropped without a panic");
    }
}
