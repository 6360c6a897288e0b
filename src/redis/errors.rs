//! What a Redis failure means here, and which failures a consumer rides out. A reply or
//! connection error becomes the crate's error with a stable kind (missing group: NotFound;
//! unreachable, refused, timed out, dropped, refused credentials, cluster trouble: Connection;
//! the rest: Transport), its message names the operation and never holds a DSN secret.
//! Invariant: only a consumer that has reached the server once waits out connection failures,
//! and a write is repeated only after a connection failure, once.

use super::engine::{RedisQueue, RedisShared};
use crate::error::{Error, ErrorKind, Result};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Pause after a connection failure of a live consumer before it tries again.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

pub(super) fn classify(err: &redis::RedisError) -> ErrorKind {
    if err.code() == Some("NOGROUP") || err.to_string().contains("NOGROUP") {
        ErrorKind::NotFound
    } else if err.is_io_error()
        || err.is_connection_refusal()
        || err.is_timeout()
        || err.is_connection_dropped()
        || is_refusal(err)
        || is_bad_database(err)
        || err.is_cluster_error()
        // LOADING: a restarted server still reading its data; it answers in a moment.
        || err.code() == Some("LOADING")
    {
        ErrorKind::Connection
    } else {
        ErrorKind::Transport
    }
}

/// Refused credentials, or a database number the server does not have: trying again will
/// not cure them.
fn is_refusal(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::AuthenticationFailed
        || err.code() == Some("NOAUTH")
        || err.code() == Some("WRONGPASS")
        || is_bad_database(err)
}

/// `SELECT n` refused: the DSN names a database number out of the server's range.
fn is_bad_database(err: &redis::RedisError) -> bool {
    err.to_string().contains("DB index is out of range")
}

impl RedisShared {
    pub(super) fn error(&self, op: &str, err: &redis::RedisError) -> Error {
        let error = Error::new(
            classify(err),
            format!("Redis transport failed during \"{op}\": {err}"),
        )
        .redacted(&self.secrets);
        if is_refusal(err) {
            error.persistent()
        } else {
            error
        }
    }

    pub(super) fn no_answer(&self, op: &str) -> Error {
        Error::connection(format!(
            "Redis transport failed during \"{op}\": no answer from the server within {} ms",
            self.connect_timeout.as_millis()
        ))
    }
}

impl RedisQueue {
    pub(super) fn err(&self, op: &str, e: &redis::RedisError) -> Error {
        self.shared.error(op, e)
    }

    /// A consumer that reached the server once rides out connection failures: it pauses
    /// and tries again (the command connection reconnects by itself) instead of ending get().
    pub(super) async fn tolerate<T>(&self, result: Result<T>, otherwise: T) -> Result<T> {
        match result {
            Err(err) if err.is_transient_connection() && self.contacted.load(Ordering::Acquire) => {
                let first = !self.riding.swap(true, Ordering::AcqRel);
                if let Some(counters) = self.counters.get() {
                    counters.failed(&err);
                    if first {
                        counters.report(
                            crate::stats::Level::Warn,
                            format!("Connection lost: {err}. get() keeps trying."),
                        );
                    }
                }
                tokio::time::sleep(RETRY_PAUSE).await;
                Ok(otherwise)
            }
            Ok(value) => {
                if self.riding.swap(false, Ordering::AcqRel) {
                    if let Some(counters) = self.counters.get() {
                        counters.reconnected();
                        counters.report(
                            crate::stats::Level::Log,
                            "Connection back: consuming again.",
                        );
                    }
                }
                Ok(value)
            }
            other => other,
        }
    }

    /// Runs a write once more when the first attempt met a connection the server had
    /// dropped (the command connection reconnects on that failure; a write that failed on a
    /// broken connection was not applied, and acks and rejects are idempotent anyway).
    pub(super) async fn with_reconnect<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        match op().await {
            Err(err) if err.is_transient_connection() && self.contacted.load(Ordering::Acquire) => {
                op().await
            }
            other => other,
        }
    }
}
