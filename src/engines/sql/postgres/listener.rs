//! One LISTEN connection per process and DSN, fanned out to every queue of the process.
//!
//! Channels are table names (upstream's NOTIFY channel), payloads queue names. Consumers ask
//! [`PgNotifyListener::is_listening`] before a long wait: while the connection is down or the
//! channel is not yet LISTENed they poll instead, and every change of state wakes them all so
//! they re-plan (a notification may have been missed while the connection was away).

use super::statements;
use crate::queue::stats::{Counters, Level};
use crate::queue::wake::WakeBoard;
use crate::support::locks::Locked;
use sqlx::postgres::{PgListener, PgPool};
use sqlx::Executor;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// A quiet listening connection is checked this often: a connection dropped without a reset
/// (a NAT entry expired, a host gone) would otherwise be waited on for ever, and idle
/// consumers would wait the whole notify timeout instead of falling back to polling.
const LIVENESS_PERIOD: Duration = Duration::from_secs(10);
/// How long the check may take before the connection is taken for dead.
const LIVENESS_BOUND: Duration = Duration::from_secs(5);

pub struct PgNotifyListener {
    pool: PgPool,
    board: Arc<WakeBoard>,
    /// Channels consumers asked for.
    wanted: Mutex<BTreeSet<String>>,
    /// Channels LISTENed on the live connection (empty while down).
    live: Mutex<BTreeSet<String>>,
    wanted_changed: Notify,
    /// Asks for the connection to be made anew (the server it is on takes no writes: its
    /// NOTIFYs come from elsewhere now).
    renew: Notify,
    stop: CancellationToken,
    started: OnceLock<()>,
    /// The counters of the queues on this connection, told when it is lost and back.
    watchers: Mutex<Vec<Weak<Counters>>>,
}

impl PgNotifyListener {
    /// `pool` is the listener's own single-connection pool, kept apart from the query pool.
    pub fn new(pool: PgPool, board: Arc<WakeBoard>) -> Arc<Self> {
        Arc::new(Self {
            pool,
            board,
            wanted: Mutex::default(),
            live: Mutex::default(),
            wanted_changed: Notify::new(),
            renew: Notify::new(),
            stop: CancellationToken::new(),
            started: OnceLock::new(),
            watchers: Mutex::default(),
        })
    }

    /// Tells `counters` (a queue's) when the LISTEN connection is lost and when it is back.
    pub fn watch(&self, counters: &Arc<Counters>) {
        let mut watchers = self.watchers.locked();
        watchers.retain(|w| w.strong_count() > 0);
        watchers.push(Arc::downgrade(counters));
    }

    fn tell(&self, level: Level, message: &str) {
        for counters in self.watchers.locked().iter().filter_map(Weak::upgrade) {
            counters.report(level, message);
        }
    }

    /// Asks for `channel` to be LISTENed (starting the listener on first use) and tells
    /// whether it already is.
    pub fn is_listening(self: &Arc<Self>, channel: &str) -> bool {
        if self.stop.is_cancelled() {
            return false;
        }
        self.started.get_or_init(|| {
            tokio::spawn(self.clone().run());
        });
        let added = self.wanted.locked().insert(channel.to_owned());
        if added {
            self.wanted_changed.notify_one();
        }
        self.live.locked().contains(channel)
    }

    /// Has the listening connection made anew, where the DSN points now: the server it is on
    /// no longer takes writes, so no NOTIFY of a send comes from it.
    pub fn renew(&self) {
        self.renew.notify_one();
    }

    /// Ends the listening task without waiting (its connection goes with the task).
    pub fn cancel(&self) {
        self.stop.cancel();
        self.live.locked().clear();
    }

    pub async fn stop(&self) {
        self.cancel();
        crate::engines::sql::target::close_pool(&self.pool, Duration::from_secs(1)).await;
    }

    async fn run(self: Arc<Self>) {
        let mut backoff = Duration::from_millis(50);
        // The connection was live and went away: its return is reported.
        let mut lost = false;
        while !self.stop.is_cancelled() {
            let channels: Vec<String> = self.wanted.locked().iter().cloned().collect();
            let connected = tokio::select! {
                _ = self.stop.cancelled() => return,
                result = connect(&self.pool, &channels) => result,
            };
            let (mut listener, listens) = match connected {
                Ok(connected) => connected,
                Err(_) => {
                    lost |= self.set_down();
                    tokio::select! {
                        _ = self.stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            backoff = Duration::from_millis(50);
            if std::mem::take(&mut lost) {
                self.tell(
                    Level::Log,
                    "LISTEN connection back: idle consumers are woken by NOTIFY again.",
                );
            }
            *self.live.locked() = channels.iter().cloned().collect();
            self.board.wake_all();
            loop {
                tokio::select! {
                    _ = self.stop.cancelled() => return,
                    // A new channel: reconnect with the full set (dropping the old connection
                    // mid-read is safe because the connection is discarded with it).
                    _ = self.wanted_changed.notified() => {
                        if self.wanted.locked().len() != self.live.locked().len() { break; }
                    }
                    _ = self.renew.notified() => {
                        lost |= self.set_down();
                        break;
                    }
                    // The check repeats the LISTENs rather than `SELECT 1`, so the
                    // connection keeps showing upstream's `LISTEN <table>` to operators; a
                    // server that has stopped taking writes (demoted by a failover) sends
                    // no NOTIFY of a send any more, and is left for where the DSN points now.
                    _ = tokio::time::sleep(LIVENESS_PERIOD) => {
                        let check = async {
                            let writable = takes_writes(&mut listener).await?;
                            relisten(&mut listener, &listens).await?;
                            Ok::<_, sqlx::Error>(writable)
                        };
                        if !matches!(tokio::time::timeout(LIVENESS_BOUND, check).await, Ok(Ok(true))) {
                            lost |= self.set_down();
                            break;
                        }
                    }
                    received = listener.try_recv() => match received {
                        Ok(Some(notification)) => {
                            self.board.wake(notification.channel(), notification.payload());
                        }
                        Ok(None) | Err(_) => {
                            lost |= self.set_down();
                            break;
                        }
                    }
                }
            }
        }
    }

    /// Marks the connection down; true if it was live (then consumers re-plan, and loggers
    /// hear of it).
    fn set_down(&self) -> bool {
        let was_live = !std::mem::take(&mut *self.live.locked()).is_empty();
        if was_live {
            self.board.wake_all();
            self.tell(
                Level::Warn,
                "LISTEN connection lost: idle consumers poll until it is back.",
            );
        }
        was_live
    }
}

/// A listening connection and the LISTEN statements it runs (one per channel).
async fn connect(
    pool: &PgPool,
    channels: &[String],
) -> Result<(PgListener, Vec<String>), sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.eager_reconnect(false);
    listener.ignore_pool_close_event(false);
    if channels.is_empty() {
        return Ok((listener, Vec::new()));
    }
    // Not sqlx's `listen_all`: it always quotes and joins (`LISTEN "t";`), which operators
    // looking for upstream's `LISTEN t` in pg_stat_activity do not find. Its own channel
    // list is not needed either: a lost connection is replaced whole by `run`.
    let written: Vec<String> = sqlx::query_scalar(statements::WRITTEN_CHANNELS)
        .bind(channels)
        .fetch_all(&mut listener)
        .await?;
    let listens: Vec<String> = written.iter().map(|w| statements::listen(w)).collect();
    relisten(&mut listener, &listens).await?;
    Ok((listener, listens))
}

/// Whether the listening connection's server takes writes (a simple query: it prepares
/// nothing).
async fn takes_writes(listener: &mut PgListener) -> Result<bool, sqlx::Error> {
    let row = listener.fetch_one("SHOW transaction_read_only").await?;
    Ok(sqlx::Row::try_get::<String, _>(&row, 0)? == "off")
}

/// Runs the LISTEN statements, one simple query each, so the connection's last statement
/// (what pg_stat_activity shows) is a LISTEN. Repeating one is a no-op on a live connection.
async fn relisten(listener: &mut PgListener, listens: &[String]) -> Result<(), sqlx::Error> {
    for listen in listens {
        listener.execute(listen.as_str()).await?;
    }
    Ok(())
}
