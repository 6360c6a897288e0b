//! What a Redis failure means here, as free functions over the driver's error. A reply or
//! connection error becomes the crate's error with a stable kind (missing group: NotFound;
//! unreachable, refused, timed out, dropped, refused credentials, cluster trouble: Connection;
//! the rest: Transport), its message names the operation and never holds a DSN secret, and
//! its cause names the failure as ioredis would have (the reply's prefix, Node's socket code).

use crate::support::error::{Cause, Error, ErrorKind, Outcome};

/// The code of the server's reply (`NOGROUP`, `UNBLOCKED`, …). Redis before 7.0 answers a
/// script whose call failed with `ERR Error running script …: NOGROUP …`: the call's code is
/// the first code-like word of that detail.
pub(super) fn reply_code(err: &redis::RedisError) -> Option<&str> {
    match err.code() {
        Some("ERR") => err
            .detail()
            .filter(|detail| detail.starts_with("Error running script"))
            .and_then(|detail| {
                detail
                    .split_whitespace()
                    .find(|word| word.len() > 3 && word.bytes().all(|b| b.is_ascii_uppercase()))
            })
            .or(Some("ERR")),
        code => code,
    }
}

pub(super) fn classify(err: &redis::RedisError) -> ErrorKind {
    if reply_code(err) == Some("NOGROUP") {
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
        // A master moved (demoted to replica, or none elected yet): asked for again.
        || matches!(err.code(), Some("READONLY" | "MASTERDOWN"))
        || err.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel
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
            .downcast_ref::<std::sync::Arc<dyn std::error::Error + Send + Sync>>()?
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

/// `SELECT n` refused: the DSN names a database number out of the server's range (a plain
/// `ERR` reply, told apart by its text alone).
fn is_bad_database(err: &redis::RedisError) -> bool {
    err.detail()
        .is_some_and(|detail| detail.starts_with("DB index is out of range"))
}

/// What a command (or transaction, or script) that failed with `err` did: nothing when the
/// server answered it with an error (a command, a `MULTI` it discarded, or a script refused
/// before it ran: every script here fails, if at all, at its first write) or never got it (a
/// refused connection or login, no master found through Sentinel); unknown when the
/// connection failed once it may have gone out, or a cluster redirected part of a pipeline.
pub(super) fn outcome(err: &redis::RedisError) -> Outcome {
    if err.is_connection_refusal()
        || is_refusal(err)
        || err.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel
    {
        Outcome::NotApplied
    } else if err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_cluster_error()
    {
        Outcome::Unknown
    } else if err.code().is_some() {
        Outcome::NotApplied
    } else {
        Outcome::Unknown
    }
}

/// The error of operation `op` that met `err`, with no secret of `secrets` in it.
pub(super) fn error_during(op: &str, err: &redis::RedisError, secrets: &[String]) -> Error {
    let error = Error::new(
        classify(err),
        format!("Redis transport failed during \"{op}\": {err}"),
    )
    .caused_by(cause(err))
    .with_outcome(outcome(err))
    .redacted(secrets);
    if is_refusal(err) {
        error.persistent()
    } else {
        error
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
