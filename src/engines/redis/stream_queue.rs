//! One stream consumer, `RedisQueue`: a `Reader` (`reads`, `idle_waits`) and a `Writer`
//! (`writes`) over one `Stream`; its `Engine` impl is in `engine`. A consumer's own blocking
//! connection is its own (the `Reader`'s).

use super::reads::Reader;
use super::stream::{Stream, StreamConfig};
use super::writes::Writer;
use crate::support::dsn::RedisDsn;
use crate::support::error::Result;
use std::sync::Arc;

/// One stream consumer: its reading side (claims, idle waits, what it holds) and its writing
/// side (sends, redeliveries, settles) over the stream they share.
pub struct RedisQueue {
    pub(super) stream: Arc<Stream>,
    pub(super) reader: Reader,
    pub(super) writer: Writer,
}

impl RedisQueue {
    pub fn open(dsn: &RedisDsn, config: StreamConfig) -> Result<Self> {
        let stream = Stream::open(dsn, config)?;
        Ok(Self {
            reader: Reader::new(stream.clone()),
            writer: Writer::new(stream.clone()),
            stream,
        })
    }

    /// Leaves the shared deployment (see [`Stream::leave_shared`]).
    pub(super) async fn leave_shared(&self) {
        self.stream.leave_shared().await;
    }
}
