//! What a Redis failure means here, and which failures a consumer rides out. A reply or
//! connection error becomes the crate's error with a stable kind (missing group: NotFound;
//! unreachable, refused, timed out, dropped, refused credentials, cluster trouble: Connection;
//! the rest: Transport), its message names the operation and never holds a DSN secret, and
//! its cause names the failure as ioredis would have (the reply's prefix, Node's socket code).
//! Invariant: only a consumer that has reached the server once waits out connection failures,
//! and a write is repeated only after a connection failure, once.

use super::engine::{RedisQueue, RedisShared};
use crate::support::error::{Cause, Error, ErrorKind, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;
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

/// What the server or the network said: a reply error's prefix as `code` (`NOGROUP`,
/// `WRONGTYPE`, `NOAUTH`, `NOPERM`, `MOVED`, `CROSSSLOT`…) with the reply's text as ioredis
/// shows it, a socket failure with Node's code, and refused credentials as `WRONGPASS` (the
/// server's answer to AUTH; the client library keeps only that it was a refusal).
pub(crate) fn cause(err: &redis::RedisError) -> Cause {
    if err.kind() == redis::ErrorKind::AuthenticationFailed {
        return Cause::new(Some("WRONGPASS"), err.to_string());
    }
    let first_reply = err
        .clone()
        .into_server_errors()
        .and_then(|errors| errors.first().map(|(_, reply)| reply.clone()));
    if let Some(reply) = first_reply {
        let text = match reply.details() {
            Some(details) => format!("{} {details}", reply.code()),
            None => reply.code().to_owned(),
        };
        return Cause::new(Some(reply.code()), text);
    }
    if let Some(io) = io_error_of(err) {
        return Cause::io(io);
    }
    let code = if err.is_connection_refusal() {
        Some("ECONNREFUSED")
    } else if err.is_timeout() {
        Some("ETIMEDOUT")
    } else if err.is_connection_dropped() {
        Some("ECONNRESET")
    } else {
        None
    };
    Cause::new(code, err.to_string())
}

/// The socket failure behind a Redis error, if that is what it is.
fn io_error_of(err: &redis::RedisError) -> Option<&std::io::Error> {
    let source = std::error::Error::source(err)?;
    // The library keeps it behind an `Arc<dyn Error>`, which is what `source` hands out.
    source.downcast_ref::<std::io::Error>().or_else(|| {
        source
            .downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>()?
            .downcast_ref::<std::io::Error>()
    })
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
        .caused_by(cause(err))
        .redacted(&self.secrets);
        if is_refusal(err) {
            error.persistent()
        } else {
            error
        }
    }

    pub(super) fn no_answer(&self, op: &str) -> Error {
        let detail = format!(
            "no answer from the server within {} ms",
            self.connect_timeout.as_millis()
        );
        Error::connection(format!("Redis transport failed during \"{op}\": {detail}"))
            .caused_by(Cause::timed_out(detail))
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
                            crate::queue::stats::Level::Warn,
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
                            crate::queue::stats::Level::Log,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_named_as_ioredis_and_node_name_them() {
        let nogroup = redis::make_extension_error(
            "NOGROUP".into(),
            Some("No such key 's' or consumer group 'g'".into()),
        );
        let named = cause(&nogroup);
        assert_eq!(named.code.as_deref(), Some("NOGROUP"));
        assert_eq!(
            named.message,
            "NOGROUP No such key 's' or consumer group 'g'"
        );

        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(cause(&refused).code.as_deref(), Some("ECONNREFUSED"));

        let auth = redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert_eq!(cause(&auth).code.as_deref(), Some("WRONGPASS"));
    }
}
