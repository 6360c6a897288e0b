//! The one error type that crosses the boundary.
//!
//! Async napi functions can only reject with a generic status and a message, so an error
//! crosses as a JSON envelope in the message (`{"code":"E_…","message":…,"cause":…}`) that
//! `lib/native/errors.js` turns back into the core's classes: the stable code becomes `error.code`,
//! the driver's own code and text become `error.cause`.

use std::fmt;

/// What kind of failure this is; each maps to one class of the core in JavaScript.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad option or input: `InvalidArgumentError`.
    InvalidArgument,
    /// Unreachable server, refused authentication, lost connection: `TransportConnectionError`.
    Connection,
    /// The table/stream/group does not exist: `TransportNotFoundError`.
    NotFound,
    /// The transport is closing or closed.
    Closed,
    /// A write refused at once because too much is already waiting to be written:
    /// `TransportError`, nothing was stored.
    BacklogFull,
    /// Anything else: `TransportError`.
    Transport,
}

impl ErrorKind {
    /// The stable code the JavaScript wrapper keys on.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "E_INVALID_ARGUMENT",
            ErrorKind::Connection => "E_CONNECTION",
            ErrorKind::NotFound => "E_NOT_FOUND",
            ErrorKind::Closed => "E_CLOSED",
            ErrorKind::BacklogFull => "E_BACKLOG_FULL",
            ErrorKind::Transport => "E_TRANSPORT",
        }
    }
}

/// What a rejected write did to storage, so that code can tell a safe retry from a risky one
/// without reading the message: crosses the boundary as `error.outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing of the operation was applied: it may be tried again as it is.
    NotApplied,
    /// The operation went out and no answer came back: it may have been applied.
    Unknown,
}

impl Outcome {
    /// The name JavaScript sees (`error.outcome`).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::NotApplied => "not-applied",
            Outcome::Unknown => "unknown",
        }
    }
}

/// What the driver, the server or the network said, as the Node drivers an app would use
/// instead name it (pg, mysql2, better-sqlite3, ioredis, Node's sockets), so that an app can
/// branch on `error.cause.code` as it did with them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// `42P01`, `ER_NO_SUCH_TABLE`, `SQLITE_BUSY`, `NOGROUP`, `ECONNREFUSED`…; `None` when
    /// the failure has no code of its own (a TLS failure, a MySQL error number mysql2 does
    /// not name).
    pub code: Option<String>,
    /// The driver's own text, already safe to show.
    pub message: String,
    /// MySQL's error number.
    pub errno: Option<u32>,
    /// MySQL's SQLSTATE.
    pub sql_state: Option<String>,
}

impl Cause {
    pub fn new(code: Option<&str>, message: impl Into<String>) -> Self {
        Self {
            code: code.map(str::to_owned),
            message: message.into(),
            errno: None,
            sql_state: None,
        }
    }

    /// A socket failure with the code Node gives it (`ECONNREFUSED`, `ETIMEDOUT`…).
    pub fn io(err: &std::io::Error) -> Self {
        Self::new(io_code(err), err.to_string())
    }

    /// Nothing answered within a bound: `ETIMEDOUT`, as Node's drivers report a connect
    /// timeout.
    pub fn timed_out(message: impl Into<String>) -> Self {
        Self::new(Some("ETIMEDOUT"), message)
    }
}

/// The code Node gives a socket failure of this kind.
pub fn io_code(err: &std::io::Error) -> Option<&'static str> {
    use std::io::ErrorKind as K;
    Some(match err.kind() {
        K::ConnectionRefused => "ECONNREFUSED",
        // A peer that closed the connection mid-answer: Node says the socket was reset.
        K::ConnectionReset | K::UnexpectedEof => "ECONNRESET",
        K::ConnectionAborted => "ECONNABORTED",
        K::TimedOut => "ETIMEDOUT",
        K::BrokenPipe => "EPIPE",
        K::NotConnected => "ENOTCONN",
        K::AddrNotAvailable => "EADDRNOTAVAIL",
        K::HostUnreachable => "EHOSTUNREACH",
        K::NetworkUnreachable => "ENETUNREACH",
        K::PermissionDenied => "EACCES",
        K::NotFound => "ENOENT",
        // A failed name lookup has no kind of its own; getaddrinfo's text tells it.
        _ => {
            let text = err.to_string();
            if text.contains("Temporary failure in name resolution") {
                "EAI_AGAIN"
            } else if text.contains("failed to lookup address") {
                "ENOTFOUND"
            } else {
                return None;
            }
        }
    })
}

/// A transport failure with a message that is already safe to show (no secrets).
#[derive(Debug, Clone, thiserror::Error)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    /// A connection failure that trying again will not cure (refused credentials, unknown
    /// database): consumers surface it after a short bound instead of riding it out.
    pub persistent: bool,
    /// What the driver, the server or the network said; `None` for a failure of our own
    /// (a bad option, a closed transport, a full backlog).
    pub cause: Option<Box<Cause>>,
    /// What a failed write did, where it is known better than its kind says (see
    /// [`Error::outcome`]).
    pub outcome: Option<Outcome>,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            persistent: false,
            cause: None,
            outcome: None,
        }
    }

    /// Says what the failed write did.
    pub fn with_outcome(mut self, outcome: Outcome) -> Self {
        self.outcome = Some(outcome);
        self
    }

    /// What the failed write did: as set, else what the kind implies (a refusal before
    /// anything went out applied nothing); `None` when it is not known from here.
    pub fn outcome(&self) -> Option<Outcome> {
        self.outcome.or(match self.kind {
            ErrorKind::InvalidArgument
            | ErrorKind::Closed
            | ErrorKind::BacklogFull
            | ErrorKind::NotFound => Some(Outcome::NotApplied),
            ErrorKind::Connection | ErrorKind::Transport => None,
        })
    }

    /// Attaches what the driver, the server or the network said.
    pub fn caused_by(mut self, cause: Cause) -> Self {
        self.cause = Some(Box::new(cause));
        self
    }

    /// Marks a failure that trying again will not cure.
    pub fn persistent(mut self) -> Self {
        self.persistent = true;
        self
    }

    /// A connection failure worth waiting out (a restart, a dropped connection, a timeout).
    pub fn is_transient_connection(&self) -> bool {
        self.kind == ErrorKind::Connection && !self.persistent
    }

    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    pub fn connection(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Connection, message)
    }

    pub fn closed(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Closed, message)
    }

    pub fn transport(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Transport, message)
    }

    pub fn backlog_full(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BacklogFull, message)
    }

    /// Removes every given secret from the message, as the last line of defence: driver
    /// messages are not ours and could one day quote a connection string.
    pub fn redacted(mut self, secrets: &[String]) -> Self {
        self.message = redact(&self.message, secrets);
        if let Some(cause) = self.cause.as_mut() {
            cause.message = redact(&cause.message, secrets);
        }
        self
    }
}

/// Replaces each non-empty secret in `text` with `***`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "***");
        }
    }
    out
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The message as it crosses the boundary: a JSON envelope `lib/native/errors.js` unpacks
    /// (`{"code","message"}`, `"outcome"` when known, and, when there is one, `"cause":{"code","message","errno","sqlState"}`,
    /// absent fields left out).
    pub fn boundary_message(&self) -> String {
        let mut envelope = serde_json::Map::new();
        envelope.insert("code".into(), self.kind.code().into());
        envelope.insert("message".into(), self.message.clone().into());
        if let Some(outcome) = self.outcome() {
            envelope.insert("outcome".into(), outcome.name().into());
        }
        if let Some(cause) = &self.cause {
            let mut fields = serde_json::Map::new();
            if let Some(code) = &cause.code {
                fields.insert("code".into(), code.clone().into());
            }
            fields.insert("message".into(), cause.message.clone().into());
            if let Some(errno) = cause.errno {
                fields.insert("errno".into(), errno.into());
            }
            if let Some(sql_state) = &cause.sql_state {
                fields.insert("sqlState".into(), sql_state.clone().into());
            }
            envelope.insert("cause".into(), fields.into());
        }
        serde_json::Value::Object(envelope).to_string()
    }
}

// Not in `cargo test`: napi::Error's drop calls into Node (see lib.rs).
#[cfg(not(test))]
impl From<Error> for napi::Error {
    fn from(err: Error) -> Self {
        napi::Error::from_reason(err.boundary_message())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable() {
        assert_eq!(ErrorKind::Connection.code(), "E_CONNECTION");
        assert_eq!(ErrorKind::NotFound.code(), "E_NOT_FOUND");
        assert_eq!(ErrorKind::InvalidArgument.code(), "E_INVALID_ARGUMENT");
        assert_eq!(ErrorKind::Closed.code(), "E_CLOSED");
        assert_eq!(ErrorKind::Transport.code(), "E_TRANSPORT");
        assert_eq!(ErrorKind::BacklogFull.code(), "E_BACKLOG_FULL");
    }

    #[test]
    fn redact_removes_every_secret() {
        let secrets = vec!["s3cr3t".to_owned(), "s3cr%33t".to_owned(), String::new()];
        assert_eq!(
            redact("password s3cr3t and s3cr%33t twice s3cr3t", &secrets),
            "password *** and *** twice ***"
        );
        assert_eq!(redact("nothing here", &secrets), "nothing here");
    }

    #[test]
    fn boundary_message_carries_the_code_and_the_cause() {
        assert_eq!(
            Error::connection("down").boundary_message(),
            r#"{"code":"E_CONNECTION","message":"down"}"#
        );
        let mut cause = Cause::new(Some("ER_NO_SUCH_TABLE"), "Table 't' doesn't exist");
        cause.errno = Some(1146);
        cause.sql_state = Some("42S02".into());
        let error = Error::new(ErrorKind::NotFound, "gone \"t\"").caused_by(cause);
        assert_eq!(
            Error::connection("lost")
                .with_outcome(Outcome::Unknown)
                .boundary_message(),
            r#"{"code":"E_CONNECTION","message":"lost","outcome":"unknown"}"#
        );
        let envelope: serde_json::Value =
            serde_json::from_str(&error.boundary_message()).expect("JSON");
        assert_eq!(
            envelope,
            serde_json::json!({
                "code": "E_NOT_FOUND",
                "message": "gone \"t\"",
                "outcome": "not-applied",
                "cause": {
                    "code": "ER_NO_SUCH_TABLE",
                    "message": "Table 't' doesn't exist",
                    "errno": 1146,
                    "sqlState": "42S02",
                },
            })
        );
    }

    #[test]
    fn redaction_reaches_the_cause() {
        let error = Error::connection("no s3cr3t here")
            .caused_by(Cause::new(Some("28P01"), "user with s3cr3t"))
            .redacted(&["s3cr3t".to_owned()]);
        assert_eq!(error.message, "no *** here");
        assert_eq!(
            error.cause.map(|c| c.message),
            Some("user with ***".to_owned())
        );
    }

    #[test]
    fn socket_failures_get_node_codes() {
        use std::io::{Error as IoError, ErrorKind as K};
        let code = |kind| io_code(&IoError::from(kind));
        assert_eq!(code(K::ConnectionRefused), Some("ECONNREFUSED"));
        assert_eq!(code(K::ConnectionReset), Some("ECONNRESET"));
        assert_eq!(code(K::TimedOut), Some("ETIMEDOUT"));
        assert_eq!(code(K::BrokenPipe), Some("EPIPE"));
        assert_eq!(
            io_code(&IoError::other(
                "failed to lookup address information: Name or service not known"
            )),
            Some("ENOTFOUND")
        );
        assert_eq!(io_code(&IoError::other("something else")), None);
    }
}
