//! What every layer uses and that knows nothing of queues: the error type and its codes, DSN
//! parsing and redaction, identifier allowlists, the one way to take a lock, the one backoff, panic-free durations, the
//! per-process shared targets per DSN, and the TCP keepalive settings. Imports nothing of the
//! crate outside this folder.

pub mod backoff;
pub mod dsn;
pub mod durations;
pub mod error;
pub mod ident;
pub mod locks;
pub mod targets;
pub mod tcp_keepalive;
