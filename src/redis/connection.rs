//! Connections to one Redis deployment (a single node, TLS or not, or a Cluster): one shared
//! command connection per process and target, plus a dedicated connection per consumer for
//! its blocking reads (a `BLOCK` on the shared connection would stall every other command).

use crate::dsn::RedisDsn;
use crate::error::{Error, Result};
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::{
    AsyncConnectionConfig, Client, Cmd, IntoConnectionInfo, Pipeline, RedisFuture, TlsCertificates,
    Value,
};
use std::time::Duration;

/// How to reach the deployment.
#[derive(Clone)]
pub enum Target {
    Node(Box<Client>),
    Cluster(Box<ClusterClient>),
}

/// One connection of either kind; used through `redis::aio::ConnectionLike`.
#[derive(Clone)]
pub enum Conn {
    /// Reconnects by itself; the shared command connection of a single node.
    Managed(ConnectionManager),
    /// A plain connection: dropped and re-made on error (blocking reads).
    Plain(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Managed(c) => c.req_packed_command(cmd),
            Conn::Plain(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Managed(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Plain(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Managed(c) => c.get_db(),
            Conn::Plain(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Connection options of a target.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    pub cluster: bool,
    /// PEM roots to trust for `rediss://` instead of the system's.
    pub tls_ca: Option<Vec<u8>>,
    pub connect_timeout: Duration,
}

/// TCP settings of every connection: no Nagle delay, and keepalive and a user timeout (see
/// `crate::tcp_keepalive`).
fn tcp_settings() -> TcpSettings {
    let settings = TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(crate::tcp_keepalive::keepalive());
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(crate::tcp_keepalive::USER_TIMEOUT);
    settings
}

impl Target {
    pub fn new(dsn: &RedisDsn, options: &ConnectOptions) -> Result<Self> {
        let invalid = |e: redis::RedisError| {
            Error::connection(format!("Invalid Redis DSN \"{}\": {e}", dsn.redacted))
                .redacted(&dsn.secrets)
        };
        let certs = || TlsCertificates {
            client_tls: None,
            root_cert: options.tls_ca.clone(),
        };
        if options.cluster {
            let mut builder = ClusterClient::builder(vec![dsn.url.as_str()])
                .tcp_settings(tcp_settings())
                .connection_timeout(options.connect_timeout)
                .response_timeout(options.connect_timeout)
                .retries(2);
            if dsn.tls && options.tls_ca.is_some() {
                builder = builder.certs(certs());
            }
            return builder
                .build()
                .map(|c| Target::Cluster(Box::new(c)))
                .map_err(invalid);
        }
        let info = dsn
            .url
            .as_str()
            .into_connection_info()
            .map_err(invalid)?
            .set_tcp_settings(tcp_settings());
        let client = if dsn.tls && options.tls_ca.is_some() {
            Client::build_with_tls(info, certs())
        } else {
            Client::open(info)
        };
        client.map(|c| Target::Node(Box::new(c))).map_err(invalid)
    }

    /// The shared command connection. A single node's reconnects by itself; a cluster
    /// connection follows MOVED/ASK and topology changes.
    pub async fn command_connection(&self, timeout: Duration) -> redis::RedisResult<Conn> {
        match self {
            Target::Node(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_secs(2));
                ConnectionManager::new_with_config((**client).clone(), config)
                    .await
                    .map(Conn::Managed)
            }
            Target::Cluster(client) => client.get_async_connection().await.map(Conn::Cluster),
        }
    }

    /// A connection of its own for blocking reads: no response timeout (the caller bounds
    /// the block and drops the connection if it gives up on it).
    pub async fn blocking_connection(&self, timeout: Duration) -> redis::RedisResult<Conn> {
        match self {
            Target::Node(client) => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(None);
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map(Conn::Plain)
            }
            Target::Cluster(client) => client.get_async_connection().await.map(Conn::Cluster),
        }
    }
}
