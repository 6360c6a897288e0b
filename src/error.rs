//! The one error type that crosses the boundary.
//!
//! Async napi functions can only reject with a generic status, so the stable code travels as a
//! `[E_CODE] ` prefix of the message and `lib/errors.js` turns it back into the core's classes.

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

/// A transport failure with a message that is already safe to show (no secrets).
#[derive(Debug, Clone, thiserror::Error)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    /// A connection failure that trying again will not cure (refused credentials, unknown
    /// database): consumers surface it after a short bound instead of riding it out.
    pub persistent: bool,
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
        }
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
    /// The message as it crosses the boundary: `[E_CODE] message`.
    pub fn boundary_message(&self) -> String {
        format!("[{}] {}", self.kind.code(), self.message)
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
    fn boundary_message_carries_code_prefix() {
        assert_eq!(
            Error::connection("down").boundary_message(),
            "[E_CONNECTION] down"
        );
    }
}
