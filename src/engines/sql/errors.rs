//! One shared kind for every dialect's driver errors: each dialect classifies its own codes
//! into a [`Failure`] and names them as its Node driver does (the error's [`Cause`]), and one
//! function builds the user-facing error from both (with secrets scrubbed), so every dialect
//! reports alike.

use crate::support::error::{Cause, Error, ErrorKind, Outcome};
use sqlx::error::DatabaseError;
use std::time::Duration;

/// How a dialect classifies a driver error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Connection,
    /// The server refused us for good: credentials, unknown database. Never retried at once
    /// (a login storm would not help); reported as a connection error.
    Refused,
    NotFound,
    /// Serialization failure / deadlock / lock wait timeout / busy file: worth another attempt.
    Transient,
    Other,
}

/// Classifies a driver error: failures below the database (I/O, TLS, pool) are the same in
/// every dialect; a server error is classified by the dialect's own codes.
pub fn classify_with(
    err: &sqlx::Error,
    classify_database: impl Fn(&dyn sqlx::error::DatabaseError) -> Failure,
) -> Failure {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Failure::Connection,
        sqlx::Error::Database(db) => classify_database(db.as_ref()),
        _ => Failure::Other,
    }
}

/// What a driver error says, as the dialect's Node driver would have named it: a server
/// error in the dialect's words, a socket failure with Node's code, a pool that gave no
/// connection in time as `ETIMEDOUT`; other driver failures with their text and no code.
pub fn cause_with(
    err: &sqlx::Error,
    database_cause: impl Fn(&dyn DatabaseError) -> Cause,
) -> Cause {
    match err {
        sqlx::Error::Database(db) => database_cause(db.as_ref()),
        sqlx::Error::Io(io) => Cause::io(io),
        sqlx::Error::PoolTimedOut => Cause::timed_out(err.to_string()),
        other => Cause::new(None, other.to_string()),
    }
}

/// Builds the user-facing error `<Dialect> transport failed during "<op>": <driver message>`,
/// with the driver's own words as its cause.
pub fn driver_error(
    label: &str,
    op: &str,
    failure: Failure,
    detail: &str,
    cause: Cause,
    secrets: &[String],
) -> Error {
    let kind = match failure {
        Failure::Connection | Failure::Refused => ErrorKind::Connection,
        Failure::NotFound => ErrorKind::NotFound,
        Failure::Transient | Failure::Other => ErrorKind::Transport,
    };
    let error = Error::new(
        kind,
        format!("{label} transport failed during \"{op}\": {detail}"),
    )
    .caused_by(cause)
    .redacted(secrets);
    if failure == Failure::Refused {
        error.persistent()
    } else {
        error
    }
}

/// Whether a statement that failed with `err` (classified `failure`) may have been applied:
/// the connection was lost without an answer. A server's error answer (the statement was
/// refused or rolled back) and a failure before anything was sent (no pooled connection, a
/// bad configuration) leave no doubt.
pub fn outcome_unknown(err: &sqlx::Error, failure: Failure) -> bool {
    failure == Failure::Connection
        && !matches!(
            err,
            sqlx::Error::Database(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::Configuration(_)
        )
}

/// What a statement that failed with `err` did to the data: nothing when the server answered
/// with an error (the statement, or its transaction, was refused or rolled back) or when it
/// never reached a server (no connection could be had, the connection was refused, a bad
/// configuration); unknown otherwise: a connection lost mid-statement, or an answer that
/// could not be read, leaves the write possibly applied.
pub fn statement_outcome(err: &sqlx::Error) -> Outcome {
    match err {
        sqlx::Error::Database(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Configuration(_) => Outcome::NotApplied,
        sqlx::Error::Io(io) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            Outcome::NotApplied
        }
        _ => Outcome::Unknown,
    }
}

/// The error for a server that accepted no connection within the connect timeout.
pub fn no_answer(label: &str, op: &str, timeout: Duration, secrets: &[String]) -> Error {
    let detail = format!(
        "no answer from the server within {} ms",
        timeout.as_millis()
    );
    let cause = Cause::timed_out(detail.clone());
    driver_error(label, op, Failure::Connection, &detail, cause, secrets)
        .with_outcome(Outcome::NotApplied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_below_the_database_are_connection_failures_in_every_dialect() {
        let never = |_: &dyn sqlx::error::DatabaseError| Failure::Other;
        assert_eq!(
            classify_with(&sqlx::Error::PoolTimedOut, never),
            Failure::Connection
        );
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(classify_with(&io, never), Failure::Connection);
        assert_eq!(
            classify_with(&sqlx::Error::RowNotFound, never),
            Failure::Other
        );
    }

    #[test]
    fn a_statement_is_unknown_only_when_it_may_have_reached_the_server() {
        let refused = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let reset = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(statement_outcome(&refused), Outcome::NotApplied);
        assert_eq!(
            statement_outcome(&sqlx::Error::PoolTimedOut),
            Outcome::NotApplied
        );
        assert_eq!(statement_outcome(&reset), Outcome::Unknown);
        assert_eq!(
            statement_outcome(&sqlx::Error::Protocol("torn".into())),
            Outcome::Unknown
        );
    }

    #[test]
    fn failures_below_the_database_are_named_as_node_names_them() {
        let never = |_: &dyn DatabaseError| -> Cause { unreachable!("no server error here") };
        let refused = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(
            cause_with(&refused, never).code.as_deref(),
            Some("ECONNREFUSED")
        );
        assert_eq!(
            cause_with(&sqlx::Error::PoolTimedOut, never)
                .code
                .as_deref(),
            Some("ETIMEDOUT")
        );
        let other = cause_with(&sqlx::Error::RowNotFound, never);
        assert_eq!(other.code, None);
        assert!(!other.message.is_empty());
    }
}
