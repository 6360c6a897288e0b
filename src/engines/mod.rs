//! The storages a queue runs on, each implementing `queue::engine::Engine`: `sql` (one
//! `TableQueue` written once over a dialect, with a folder per dialect) and `redis` (Redis
//! Streams). An engine may import `queue::engine` and the queue's shared counters and wake-ups,
//! `support`, and `direct` only for the host's descriptors; never another engine, and never
//! the queue's logic above the contract.

pub mod redis;
pub mod sql;
