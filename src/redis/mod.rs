//! Redis Streams: the upstream stream layout (entries with `body` and `headers`, a consumer
//! group, a delayed zset of `{"nonce","body","headers"}` members scored in epoch ms), with
//! reads and acks batched, blocking reads on a connection of their own, delayed messages
//! promoted atomically on Redis's clock, and stalled entries reclaimed periodically.

pub mod connection;
mod engine;
mod reads;
mod replies;
pub mod slot;
mod writes;

pub use engine::{RedisQueue, StreamConfig};
