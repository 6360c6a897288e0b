//! One queue as the queue side of its dialect ([`super::dialect::SqlDialect`]) is handed it:
//! its connection target, its options ([`QueueConfig`]) and the dialect's own statements for
//! its table. The table queue owns one and passes it to every dialect method, so that the
//! dialect never names the table queue.
//!
//! May import the connector and the target, nothing above them.

use super::connector::Connector;
use super::target::SqlTarget;
use crate::support::error::Error;
use std::sync::Arc;
use std::time::Duration;

/// The options a table queue needs besides its DSN.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    pub table: String,
    pub queue: String,
    pub redeliver_timeout_seconds: f64,
    pub use_notify: bool,
    pub connect_timeout: Duration,
    pub poll_interval: Duration,
    pub notify_timeout: Duration,
    /// `maxConnections`: the budget of every connection to the DSN in this process.
    pub max_connections: Option<u32>,
}

/// One queue of one table in dialect `C`, as its dialect's methods see it.
pub struct QueueContext<C: Connector> {
    pub target: Arc<SqlTarget<C>>,
    pub config: QueueConfig,
    /// The dialect's own statements.
    pub sql: C::Statements,
}

impl<C: Connector> QueueContext<C> {
    /// A driver error of operation `op` as the user's error.
    pub fn err(&self, op: &str, e: sqlx::Error) -> Error {
        self.target.error(op, &e)
    }
}
