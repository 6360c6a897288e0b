//! Connections to one Redis deployment (a single node, TLS or not, found through Sentinel or
//! not, or a Cluster): one shared command connection per process and target, plus, on a
//! single node, connections of their own for blocking reads (a `BLOCK` on the shared
//! connection would stall every other command).

use super::sentinel::{MasterConnection, Sentinels};
use crate::support::dsn::RedisDsn;
use crate::support::error::{Error, Result};
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::TcpSettings;
use redis::{
    AsyncConnectionConfig, Client, ClientTlsConfig, Cmd, ConnectionAddr, ConnectionInfo,
    IntoConnectionInfo, Pipeline, RedisFuture, TlsCertificates, Value,
};
use std::sync::Arc;
use std::time::Duration;

/// How to reach the deployment.
#[derive(Clone)]
pub enum Target {
    Node(Box<Client>),
    /// A single node, the master its sentinels name.
    Sentinel(Arc<Sentinels>),
    Cluster(Box<ClusterTarget>),
}

/// Where a single node's connections of their own (blocked reads) go.
#[derive(Clone)]
pub enum SingleNode {
    Fixed(Box<Client>),
    Sentinel(Arc<Sentinels>),
}

impl SingleNode {
    /// A client of the node: the master as the sentinels name it now.
    pub async fn client(&self) -> redis::RedisResult<Client> {
        match self {
            SingleNode::Fixed(client) => Ok((**client).clone()),
            SingleNode::Sentinel(sentinels) => sentinels.master().await,
        }
    }

    /// Hears a failure of one of the node's own connections: through Sentinel, the master
    /// may have moved.
    pub fn heard(&self, err: &redis::RedisError) {
        if let SingleNode::Sentinel(sentinels) = self {
            if Sentinels::moved_by(err) {
                sentinels.forget();
            }
        }
    }
}

/// A cluster: the client that routes commands, and how to reach one node of it directly (the
/// seed's credentials, database and TLS settings, another node's address).
#[derive(Clone)]
pub struct ClusterTarget {
    client: ClusterClient,
    seed: ConnectionInfo,
    certs: Option<TlsCertificates>,
}

impl ClusterTarget {
    /// The seed node's address, `host:port` as a `MOVED` reply names nodes.
    pub fn seed_address(&self) -> String {
        match self.seed.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                format!("{host}:{port}")
            }
            other => other.to_string(),
        }
    }

    /// The seed node's host: where a node announced without one (the "unknown endpoint"
    /// form) is reached, as the cluster client does.
    pub fn seed_host(&self) -> String {
        match self.seed.addr() {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
            _ => String::new(),
        }
    }

    /// A node address as a `MOVED` reply gives it, with the seed's host where it names none
    /// (`:port`).
    pub fn reachable(&self, address: &str) -> String {
        match address.strip_prefix(':') {
            Some(port) => format!("{}:{port}", self.seed_host()),
            None => address.to_owned(),
        }
    }

    /// A RESP3 connection of its own to the node at `address` (`host:port`), whose push
    /// messages (key invalidations, the library's disconnection notice) go to `pushes`.
    pub async fn node_connection(
        &self,
        address: &str,
        timeout: Duration,
        pushes: impl redis::aio::AsyncPushSender,
    ) -> redis::RedisResult<MultiplexedConnection> {
        let (host, port) = address
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host.trim_matches(['[', ']']), port.parse().ok()?)))
            .ok_or_else(|| {
                redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "not a node address",
                    address.to_owned(),
                ))
            })?;
        let addr = match self.seed.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        let settings = self
            .seed
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let info = self
            .seed
            .clone()
            .set_addr(addr)
            .set_redis_settings(settings);
        let client = match &self.certs {
            Some(certs) => Client::build_with_tls(info, certs.clone())?,
            None => Client::open(info)?,
        };
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_push_sender(pushes);
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }
}

/// One connection of any kind; used through `redis::aio::ConnectionLike`.
#[derive(Clone)]
pub enum Conn {
    /// Reconnects by itself; the shared command connection of a single node.
    Managed(ConnectionManager),
    /// To the master the sentinels name, asked for again when it may have moved.
    Master(MasterConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Managed(c) => c.req_packed_command(cmd),
            Conn::Master(c) => c.req_packed_command(cmd),
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
            Conn::Master(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Managed(c) => c.get_db(),
            Conn::Master(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Connection options of a target.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    pub cluster: bool,
    /// PEM roots to trust over TLS instead of the system's.
    pub tls_ca: Option<Vec<u8>>,
    pub connect_timeout: Duration,
    /// What `redisOptions` adds to the DSN.
    pub overrides: Overrides,
}

/// Connection settings given beside the DSN (ioredis's `redisOptions`), each one only where the
/// DSN says nothing of it: the JavaScript wrapper refuses a value the DSN contradicts.
#[derive(Clone, Default, Hash)]
pub struct Overrides {
    /// TLS even for `redis://`: ioredis turns it on for any `tls` object.
    pub tls: bool,
    /// Client certificate chain (PEM) and its key, for servers that ask for one.
    pub tls_cert: Option<Vec<u8>>,
    pub tls_key: Option<Vec<u8>>,
    /// Any server certificate is accepted (`tls.rejectUnauthorized: false`).
    pub tls_insecure: bool,
    pub port: Option<u16>,
    pub db: Option<i64>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// No `CLIENT SETINFO` on connecting (`disableClientInfo`).
    pub skip_client_info: bool,
    /// A Unix socket to connect to instead of the DSN's host and port.
    pub path: Option<String>,
    /// The deployment's sentinels (ioredis's `sentinels`): the DSN's host and port are not
    /// used, its credentials and database are the master's.
    pub sentinels: Vec<(String, u16)>,
    /// The master's name the sentinels know (ioredis's `name`).
    pub sentinel_name: Option<String>,
    /// The sentinels' own credentials (`sentinelUsername`, `sentinelPassword`).
    pub sentinel_username: Option<String>,
    pub sentinel_password: Option<String>,
}

// The password and the key are never shown.
impl std::fmt::Debug for Overrides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overrides")
            .field("tls", &self.tls)
            .field("tls_cert", &self.tls_cert.is_some())
            .field("tls_key", &self.tls_key.is_some())
            .field("tls_insecure", &self.tls_insecure)
            .field("port", &self.port)
            .field("db", &self.db)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("skip_client_info", &self.skip_client_info)
            .field("path", &self.path)
            .field("sentinels", &self.sentinels)
            .field("sentinel_name", &self.sentinel_name)
            .field("sentinel_username", &self.sentinel_username)
            .field(
                "sentinel_password",
                &self.sentinel_password.as_ref().map(|_| "***"),
            )
            .finish()
    }
}

impl ConnectOptions {
    /// The DSN's secrets and the password given beside it: what no message may show.
    pub fn secrets(&self, dsn: &RedisDsn) -> Vec<String> {
        let mut secrets = dsn.secrets.clone();
        secrets.extend(
            [&self.overrides.password, &self.overrides.sentinel_password]
                .into_iter()
                .flatten()
                .filter(|p| !p.is_empty())
                .cloned(),
        );
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets
    }

    /// A digest of everything the connections are made with but the DSN: transports that
    /// differ in any of it get connections of their own.
    pub fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.cluster.hash(&mut hasher);
        self.tls_ca.hash(&mut hasher);
        self.connect_timeout.hash(&mut hasher);
        self.overrides.hash(&mut hasher);
        hasher.finish()
    }

    /// The DSN's connection info with the overrides applied.
    fn connection_info(&self, dsn: &RedisDsn) -> redis::RedisResult<ConnectionInfo> {
        let info = dsn
            .url
            .as_str()
            .into_connection_info()?
            .set_tcp_settings(tcp_settings());
        let o = &self.overrides;
        let addr = match info.addr().clone() {
            ConnectionAddr::Tcp(host, port) if o.tls => ConnectionAddr::TcpTls {
                host,
                port: o.port.unwrap_or(port),
                insecure: o.tls_insecure,
                tls_params: None,
            },
            ConnectionAddr::Tcp(host, port) => ConnectionAddr::Tcp(host, o.port.unwrap_or(port)),
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure,
                tls_params,
            } => ConnectionAddr::TcpTls {
                host,
                port: o.port.unwrap_or(port),
                insecure: insecure || o.tls_insecure,
                tls_params,
            },
            other => other,
        };
        let addr = match &o.path {
            Some(path) => ConnectionAddr::Unix(std::path::PathBuf::from(path)),
            None => addr,
        };
        let mut settings = info.redis_settings().clone();
        if let Some(db) = o.db {
            settings = settings.set_db(db);
        }
        if let Some(username) = &o.username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &o.password {
            settings = settings.set_password(password);
        }
        if o.skip_client_info {
            settings = settings.set_skip_set_lib_name();
        }
        Ok(info.set_addr(addr).set_redis_settings(settings))
    }

    /// The sentinels of the master `name`, whose connections get `node`'s settings.
    fn sentinels(&self, name: &str, node: ConnectionInfo) -> redis::RedisResult<Arc<Sentinels>> {
        let o = &self.overrides;
        let mut settings = redis::RedisConnectionInfo::default();
        if let Some(username) = &o.sentinel_username {
            settings = settings.set_username(username);
        }
        if let Some(password) = &o.sentinel_password {
            settings = settings.set_password(password);
        }
        let sentinels = o
            .sentinels
            .iter()
            .map(|(host, port)| {
                Ok(ConnectionAddr::Tcp(host.clone(), *port)
                    .into_connection_info()?
                    .set_redis_settings(settings.clone())
                    .set_tcp_settings(tcp_settings()))
            })
            .collect::<redis::RedisResult<Vec<_>>>()?;
        Sentinels::new(name.to_owned(), sentinels, node, self.connect_timeout)
    }

    /// Roots and client certificate to use, if any is given and the connection is TLS.
    fn certificates(&self, info: &ConnectionInfo) -> Option<TlsCertificates> {
        if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
            return None;
        }
        let o = &self.overrides;
        let client_tls = match (&o.tls_cert, &o.tls_key) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            _ => None,
        };
        (client_tls.is_some() || self.tls_ca.is_some()).then(|| TlsCertificates {
            client_tls,
            root_cert: self.tls_ca.clone(),
        })
    }
}

/// TCP settings of every connection: no Nagle delay, and keepalive and a user timeout (see
/// `crate::support::tcp_keepalive`).
fn tcp_settings() -> TcpSettings {
    let settings = TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(crate::support::tcp_keepalive::keepalive());
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(crate::support::tcp_keepalive::USER_TIMEOUT);
    settings
}

impl Target {
    /// Where the node's own connections go; none on a cluster.
    pub fn single_node(&self) -> Option<SingleNode> {
        match self {
            Target::Node(client) => Some(SingleNode::Fixed(client.clone())),
            Target::Sentinel(sentinels) => Some(SingleNode::Sentinel(sentinels.clone())),
            Target::Cluster(_) => None,
        }
    }

    pub fn new(dsn: &RedisDsn, options: &ConnectOptions) -> Result<Self> {
        let invalid = |e: redis::RedisError| {
            Error::connection(format!("Invalid Redis DSN \"{}\": {e}", dsn.redacted))
                .redacted(&options.secrets(dsn))
        };
        let info = options.connection_info(dsn).map_err(invalid)?;
        let certs = options.certificates(&info);
        if let Some(name) = &options.overrides.sentinel_name {
            return options
                .sentinels(name, info)
                .map(Target::Sentinel)
                .map_err(invalid);
        }
        if options.cluster {
            // The first node's credentials, database and TLS mode apply to every node.
            let seed = info.clone();
            let mut builder = ClusterClient::builder(vec![info])
                .tcp_settings(tcp_settings())
                .connection_timeout(options.connect_timeout)
                .response_timeout(options.connect_timeout)
                .retries(2);
            if let Some(certs) = &certs {
                builder = builder.certs(certs.clone());
            }
            return builder
                .build()
                .map(|client| {
                    Target::Cluster(Box::new(ClusterTarget {
                        client,
                        seed,
                        certs,
                    }))
                })
                .map_err(invalid);
        }
        let client = match certs {
            Some(certs) => Client::build_with_tls(info, certs),
            None => Client::open(info),
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
            Target::Sentinel(sentinels) => {
                // Found now, so that an unreachable deployment fails the first use at once.
                sentinels.master().await?;
                Ok(Conn::Master(MasterConnection::new(sentinels.clone())))
            }
            Target::Cluster(cluster) => cluster
                .client
                .get_async_connection()
                .await
                .map(Conn::Cluster),
        }
    }
}

/// A connection of its own to a single node for blocking reads: no response timeout (the
/// caller bounds the block and drops the connection if it gives up on it). A cluster's idle
/// consumers track keys instead (`idle_read/tracking`), so no blocked read goes to one.
pub async fn blocking_connection(
    node: &Client,
    timeout: Duration,
) -> redis::RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(None);
    node.get_multiplexed_async_connection_with_config(&config)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(overrides: Overrides) -> ConnectOptions {
        ConnectOptions {
            connect_timeout: Duration::from_secs(1),
            overrides,
            ..Default::default()
        }
    }

    #[test]
    fn overrides_fill_in_the_dsn() {
        let dsn = crate::support::dsn::parse_redis_dsn("redis://127.0.0.1:6390").unwrap();
        let info = options(Overrides {
            db: Some(5),
            username: Some("app".to_owned()),
            password: Some("s3cret".to_owned()),
            port: Some(7000),
            skip_client_info: true,
            ..Default::default()
        })
        .connection_info(&dsn)
        .unwrap();
        assert!(matches!(info.addr(), ConnectionAddr::Tcp(host, 7000) if host == "127.0.0.1"));
        let settings = info.redis_settings();
        assert_eq!(settings.db(), 5);
        assert_eq!(settings.username(), Some("app"));
        assert_eq!(settings.password(), Some("s3cret"));
        assert!(settings.skip_set_lib_name());
    }

    #[test]
    fn a_tls_object_turns_tls_on_for_redis_urls() {
        let dsn = crate::support::dsn::parse_redis_dsn("redis://localhost:6390/2").unwrap();
        let o = options(Overrides {
            tls: true,
            tls_insecure: true,
            ..Default::default()
        });
        let info = o.connection_info(&dsn).unwrap();
        assert!(matches!(
            info.addr(),
            ConnectionAddr::TcpTls { host, port: 6390, insecure: true, .. } if host == "localhost"
        ));
        assert_eq!(info.redis_settings().db(), 2);
        assert!(o.certificates(&info).is_none());
    }

    #[test]
    fn the_password_is_a_secret_and_never_debug_printed() {
        let dsn = crate::support::dsn::parse_redis_dsn("redis://127.0.0.1:6390").unwrap();
        let o = options(Overrides {
            password: Some("s3cret-pw".to_owned()),
            tls_key: Some(b"KEY".to_vec()),
            ..Default::default()
        });
        assert!(o.secrets(&dsn).contains(&"s3cret-pw".to_owned()));
        let shown = format!("{o:?}");
        assert!(!shown.contains("s3cret-pw"), "{shown}");
    }

    #[test]
    fn transports_differing_in_any_option_get_targets_of_their_own() {
        let a = options(Overrides::default());
        let b = options(Overrides {
            db: Some(1),
            ..Default::default()
        });
        assert_ne!(a.digest(), b.digest());
        assert_eq!(a.digest(), options(Overrides::default()).digest());
    }
}
