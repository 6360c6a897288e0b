//! A single node found through Redis Sentinel (ioredis's `sentinels` and `name`): the master
//! of the named deployment as the sentinels tell it, checked with `ROLE` before it is used,
//! and asked for again whenever it may have moved: a connection to it lost or unanswered, a
//! write refused as `READONLY` (a master demoted to replica), or a `+switch-master`
//! announced by a sentinel. Every exchange is bounded by the connect timeout.
//!
//! Owns the master's address as last found and the command connection to it; the
//! connections of their own (blocked reads) ask it for the master when they open.

use crate::support::locks::Locked;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, Pipeline, RedisError,
    RedisFuture, RedisResult, Value,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long the `+switch-master` watch waits before it subscribes again after losing its
/// sentinel.
const WATCH_RETRY: Duration = Duration::from_secs(1);

/// The deployment's sentinels and how to reach the master they name.
pub struct Sentinels {
    /// The master's name (ioredis's `name`).
    name: String,
    /// One client per sentinel, with the sentinels' own credentials.
    sentinels: Vec<Client>,
    /// The master's settings (database, credentials) at a placeholder address.
    node: ConnectionInfo,
    timeout: Duration,
    /// The master as last found, and the count of times it was found anew or given up.
    master: Mutex<Option<Client>>,
    changes: AtomicU64,
    /// The command connection to the master, and the `changes` it was opened at.
    commands: tokio::sync::Mutex<Option<(u64, MultiplexedConnection)>>,
    watch: CancellationToken,
    /// The `+switch-master` watch was started (once, whether or not a master was found).
    watching: std::sync::atomic::AtomicBool,
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        self.watch.cancel();
    }
}

impl Sentinels {
    /// `sentinels` are the sentinels' connection infos (their addresses and credentials),
    /// `node` the master's settings; nothing is connected until first use.
    pub fn new(
        name: String,
        sentinels: Vec<ConnectionInfo>,
        node: ConnectionInfo,
        timeout: Duration,
    ) -> RedisResult<Arc<Self>> {
        let sentinels = sentinels
            .into_iter()
            .map(Client::open)
            .collect::<RedisResult<Vec<_>>>()?;
        Ok(Arc::new(Self {
            name,
            sentinels,
            node,
            timeout,
            master: Mutex::new(None),
            changes: AtomicU64::new(0),
            commands: tokio::sync::Mutex::new(None),
            watch: CancellationToken::new(),
            watching: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// The master's database (what `SELECT` each connection makes).
    pub fn db(&self) -> i64 {
        self.node.redis_settings().db()
    }

    /// A client of the master, as last found or found now.
    pub async fn master(self: &Arc<Self>) -> RedisResult<Client> {
        if let Some(master) = self.master.locked().clone() {
            return Ok(master);
        }
        self.start_watch();
        let found = self.find().await?;
        *self.master.locked() = Some(found.clone());
        self.changes.fetch_add(1, Ordering::Relaxed);
        Ok(found)
    }

    /// The master may have moved: the next use asks the sentinels again.
    pub fn forget(&self) {
        if self.master.locked().take().is_some() {
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether `err` says the master may have moved: its connection lost, refused or
    /// unanswered, or a write refused by a replica (`READONLY`) or a master without its
    /// replicas' quorum of sentinels' trust (`MASTERDOWN`).
    pub fn moved_by(err: &RedisError) -> bool {
        err.is_io_error()
            || err.is_connection_refusal()
            || err.is_connection_dropped()
            || err.is_timeout()
            || matches!(err.code(), Some("READONLY" | "MASTERDOWN"))
    }

    /// Asks each sentinel in turn for the master's address, and takes the first address
    /// whose server says it is a master.
    async fn find(&self) -> RedisResult<Client> {
        let mut last = None;
        for sentinel in &self.sentinels {
            let found = match self.ask(sentinel).await {
                Ok(address) => self.checked(address).await,
                Err(err) => Err(err),
            };
            match found {
                Ok(master) => return Ok(master),
                Err(err) => last = Some(err),
            }
        }
        Err(match last {
            Some(err) if err.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel => err,
            Some(err) => no_master(&self.name, &format!("no sentinel answered ({err})")),
            None => no_master(&self.name, "no sentinel is configured"),
        })
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME` on one sentinel.
    async fn ask(&self, sentinel: &Client) -> RedisResult<(String, u16)> {
        let mut conn = connect(sentinel, self.timeout).await?;
        let reply: Option<(String, u16)> = bounded(
            self.timeout,
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.name)
                .query_async(&mut conn),
        )
        .await?;
        reply.ok_or_else(|| no_master(&self.name, "the sentinels know no master of that name"))
    }

    /// A client of the server at `address` if it says it is a master (a sentinel may name
    /// the old master for a moment after a failover).
    async fn checked(&self, (host, port): (String, u16)) -> RedisResult<Client> {
        let info = self.node.clone().set_addr(ConnectionAddr::Tcp(host, port));
        let client = Client::open(info)?;
        let mut conn = connect(&client, self.timeout).await?;
        let role: Vec<Value> =
            bounded(self.timeout, redis::cmd("ROLE").query_async(&mut conn)).await?;
        match role.first() {
            Some(Value::BulkString(role)) if role.as_slice() == b"master" => Ok(client),
            _ => Err(no_master(
                &self.name,
                "the server the sentinels name is not a master yet",
            )),
        }
    }

    /// Follows `+switch-master` on the sentinels (one at a time), so that a master that
    /// moved is forgotten at once rather than at the first command that fails on it.
    fn start_watch(self: &Arc<Self>) {
        if self.sentinels.is_empty() || self.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = Arc::downgrade(self);
        let stop = self.watch.clone();
        let sentinels = self.sentinels.clone();
        let name = self.name.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = watch_switches(this, sentinels, name) => {}
                () = stop.cancelled() => {}
            }
        });
    }

    async fn command_connection(&self, master: &Client) -> RedisResult<MultiplexedConnection> {
        let changes = self.changes.load(Ordering::Relaxed);
        let mut slot = self.commands.lock().await;
        if let Some((at, conn)) = slot.as_ref() {
            if *at == changes {
                return Ok(conn.clone());
            }
        }
        let conn = connect(master, self.timeout).await?;
        *slot = Some((changes, conn.clone()));
        Ok(conn)
    }
}

async fn watch_switches(sentinels_of: Weak<Sentinels>, sentinels: Vec<Client>, name: String) {
    use futures_util::StreamExt;
    for sentinel in sentinels.iter().cycle() {
        let Some(timeout) = sentinels_of.upgrade().map(|s| s.timeout) else {
            return;
        };
        let subscribed = async {
            let mut pubsub = bounded(timeout, sentinel.get_async_pubsub()).await?;
            bounded(timeout, pubsub.subscribe("+switch-master")).await?;
            RedisResult::Ok(pubsub)
        }
        .await;
        if let Ok(mut pubsub) = subscribed {
            let mut messages = pubsub.on_message();
            while let Some(message) = messages.next().await {
                let text: String = message.get_payload().unwrap_or_default();
                // "<name> <old-ip> <old-port> <new-ip> <new-port>"
                if text.split(' ').next() != Some(name.as_str()) {
                    continue;
                }
                match sentinels_of.upgrade() {
                    Some(s) => s.forget(),
                    None => return,
                }
            }
        }
        tokio::time::sleep(WATCH_RETRY).await;
    }
}

/// The command connection of a deployment behind Sentinel: each command goes to the master
/// as last found, and a failure that says it may have moved forgets it (the caller's retry,
/// or the next command, asks the sentinels again).
#[derive(Clone)]
pub struct MasterConnection {
    sentinels: Arc<Sentinels>,
}

impl MasterConnection {
    pub fn new(sentinels: Arc<Sentinels>) -> Self {
        Self { sentinels }
    }

    /// The connection to the master; failing, an error that says nothing was sent.
    async fn current(&self) -> RedisResult<MultiplexedConnection> {
        let master = self.sentinels.master().await?;
        let opened = self.sentinels.command_connection(&master).await;
        self.heard(opened)
            .map_err(|err| no_master(&self.sentinels.name, &err.to_string()))
    }

    fn heard<T>(&self, result: RedisResult<T>) -> RedisResult<T> {
        if let Err(err) = &result {
            if Sentinels::moved_by(err) {
                self.sentinels.forget();
            }
        }
        result
    }
}

impl ConnectionLike for MasterConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut conn = self.current().await?;
            let reply = conn.req_packed_command(cmd).await;
            self.heard(reply)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.current().await?;
            let replies = conn.req_packed_commands(pipeline, offset, count).await;
            self.heard(replies)
        })
    }

    fn get_db(&self) -> i64 {
        self.sentinels.db()
    }
}

/// A connection to `client`'s server with every exchange bounded by `timeout`.
async fn connect(client: &Client, timeout: Duration) -> RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    bounded(
        timeout,
        client.get_multiplexed_async_connection_with_config(&config),
    )
    .await
}

async fn bounded<T>(
    timeout: Duration,
    work: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or_else(|_| {
            Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "no answer within the connect timeout",
            )))
        })
}

/// No master to send to (nothing was sent): of the library's kinds, the one Sentinel's own
/// lookup fails with.
pub fn no_master(name: &str, why: &str) -> RedisError {
    RedisError::from((
        redis::ErrorKind::MasterNameNotFoundBySentinel,
        "Redis Sentinel gave no reachable master",
        format!("for \"{name}\": {why}"),
    ))
}
