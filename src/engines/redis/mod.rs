//! Redis Streams: the upstream stream layout (entries with `body` and `headers`, a consumer
//! group, a delayed zset of `{"nonce","body","headers"}` members scored in epoch ms), with
//! reads and acks batched, one blocking read shared by the idle consumers of a single node (on
//! a cluster, one key-tracking connection per node), delayed messages
//! promoted atomically on Redis's clock, and stalled entries reclaimed periodically.
//!
//! One concern per file: `stream_queue` (the consumer: a reader and a writer over a stream),
//! `stream` (the stream and the deployment it shares, and how failures are reported and ridden
//! out), `engine` (the consumer's `Engine` impl, and the direct wire), `reads` (the reader:
//! claims, XAUTOCLAIM), `idle_waits` (the reader's idle wait), `idle_read` (the
//! blocking read and poll the idle consumers share; `idle_read/tracking`, a cluster's key
//! tracking in the read's place), `blocked` (ending a blocked read early), `delivered` (the
//! pending entries the queue holds, which re-reads skip), `writes` (the writer: sends, delayed
//! adds, rejects, acks), `send_batch` (a batch's marker and first transaction, no I/O), `replies`
//! (reply parsing, no I/O), `errors` (classification and causes), `spent_markers` (batch
//! markers no send reads again, deleted in sets),
//! `connection` (node, TLS, cluster), `slot` (cluster key slots), `direct` (a single node's
//! sends on the JavaScript thread) and `resp` (reading its replies); the Lua scripts are in
//! `scripts/`.

mod blocked;
pub mod connection;
mod delivered;
mod direct;
mod engine;
pub(crate) mod errors;
mod idle_read;
mod idle_waits;
#[cfg(test)]
mod io_tests;
mod read_budget;
mod reads;
mod replies;
mod resp;
mod send_batch;
pub mod sentinel;
pub mod slot;
mod spent_markers;
mod stream;
mod stream_queue;
mod writes;

/// Builds replies in the tests of what parses them (here and in `diagnostics`).
#[cfg(test)]
pub(crate) use replies::bulk;
pub use stream::StreamConfig;
pub use stream_queue::RedisQueue;
