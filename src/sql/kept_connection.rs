//! A connection a draining consumer keeps from one claim to the next instead of handing it
//! back to the pool. sqlx pings a connection on its way back (in a task of its own), so the
//! claim right after finds it busy and opens another one: on PostgreSQL a backend start, and a
//! claim statement planned again on cold caches. Measured at depth 3,000: claims waited 5–11
//! ms for a connection, and the consumer about 15% longer in all. Only a connection whose
//! statement completed is kept, at most one per target (whichever claim finds it takes it, so
//! a pool of 10 keeps 9 for everything else), and for at most `KEEP_FOR`: a consumer that
//! stops claiming gives it back to the pool soon.

use sqlx::pool::{Pool, PoolConnection};
use sqlx::Database;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a kept connection waits for the next claim before it goes back to the pool.
const KEEP_FOR: Duration = Duration::from_secs(1);

struct Kept<DB: Database> {
    conn: PoolConnection<DB>,
    /// Which `keep` put it there, so that an older keep's timer leaves it alone.
    generation: u64,
}

pub struct KeptConnection<DB: Database> {
    slot: Arc<Mutex<Option<Kept<DB>>>>,
    generations: AtomicU64,
}

impl<DB: Database> Default for KeptConnection<DB> {
    fn default() -> Self {
        Self {
            slot: Arc::default(),
            generations: AtomicU64::new(0),
        }
    }
}

impl<DB: Database> KeptConnection<DB> {
    /// The kept connection, or one from `pool`.
    pub async fn take(&self, pool: &Pool<DB>) -> Result<PoolConnection<DB>, sqlx::Error> {
        let kept = lock(&self.slot).take();
        match kept {
            Some(kept) => Ok(kept.conn),
            None => pool.acquire().await,
        }
    }

    /// Keeps `conn` for the next `take` (for at most `KEEP_FOR`), or hands it back to the
    /// pool if one is kept already. Call only in a runtime, with a connection whose last
    /// statement completed (nothing left to read, no transaction open).
    pub fn keep(&self, conn: PoolConnection<DB>) {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        {
            let mut slot = lock(&self.slot);
            if slot.is_some() {
                drop(slot);
                drop(conn);
                return;
            }
            *slot = Some(Kept { conn, generation });
        }
        let slot = Arc::downgrade(&self.slot);
        tokio::spawn(async move {
            tokio::time::sleep(KEEP_FOR).await;
            if let Some(slot) = slot.upgrade() {
                let mut slot = lock(&slot);
                let expired = slot.as_ref().is_some_and(|k| k.generation == generation);
                let given_back = expired.then(|| slot.take());
                drop(slot);
                drop(given_back);
            }
        });
    }

    /// Hands the kept connection back to the pool (before the pool closes, which would
    /// otherwise wait for it).
    pub fn give_back(&self) {
        let kept = lock(&self.slot).take();
        drop(kept);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
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
}
