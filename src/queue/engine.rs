//! The contract between the engine-independent queue (`crate::queue`) and a storage engine
//! (the SQL engines in `crate::engines::sql`, Redis Streams in `crate::engines::redis`). Ids are strings: decimal
//! row ids for SQL, `<ms>-<seq>` entry ids for streams.

use crate::queue::wake::{WaitEnd, WakeSignal};
use crate::support::error::{Error, Result};
use futures_util::future::BoxFuture;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A stored message as an engine hands it out: its id, and body and headers exactly as
/// stored (the serializer in JavaScript decodes them; nothing is re-parsed here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    pub id: String,
    pub body: String,
    pub headers: String,
    /// The claim this process holds on it (see [`Held`]); `None` when it was only read.
    pub token: Option<ClaimToken>,
}

/// What makes a settle of a claimed message apply only while this process's claim is the
/// message's current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimToken {
    /// SQL: the claim's `delivered_at` in microseconds, which the settle's statement matches.
    DeliveredAt(i64),
    /// Redis: the consumer group's pending-entries list fences by owner; the token only says
    /// that this consumer holds the entry.
    PendingOwner,
}

impl ClaimToken {
    /// The SQL claim's `delivered_at`, if this is one.
    pub fn delivered_at(self) -> Option<i64> {
        match self {
            Self::DeliveredAt(micros) => Some(micros),
            Self::PendingOwner => None,
        }
    }
}

/// A message named for a settle, release or renewal: its id, and the token of the claim this
/// process holds on it. A settle with a token is fenced: it applies only while that claim is
/// still the message's current one, so a consumer whose lease lapsed and whose message was
/// taken over cannot delete or copy the newer delivery. Without a token (a `find()` result)
/// it goes by id (see [`ClaimToken`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub id: String,
    pub token: Option<ClaimToken>,
}

/// A message to store: `delay_ms` is added to the storage's own clock.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub body: String,
    pub headers: String,
    pub delay_ms: f64,
}

impl NewMessage {
    /// A message due after `delay_ms`; a negative, NaN or infinite delay means "now".
    pub fn new(body: String, headers: String, delay_ms: f64) -> Self {
        let delay_ms = if delay_ms.is_finite() && delay_ms > 0.0 {
            delay_ms
        } else {
            0.0
        };
        Self {
            body,
            headers,
            delay_ms,
        }
    }
}

/// Everything a queue needs from storage, for one queue (table + queue name, or stream).
pub trait Engine: Send + Sync {
    /// The in-process wake signal of this queue (local sends bump it).
    fn wake_signal(&self) -> Arc<WakeSignal>;

    /// The engine's side of sends served on the JavaScript thread, if it has one.
    fn direct_wire(self: Arc<Self>) -> Option<Arc<dyn DirectWire>> {
        None
    }

    /// Hands the engine its queue's counters, for the figures only it knows (a Redis
    /// consumer's tracked ids); other engines ignore them.
    fn attach_counters(&self, _counters: Arc<crate::queue::stats::Counters>) {}
    /// Polls this process ran for the idle consumers of this queue's table, shared by every
    /// queue of it (0 where idle consumers wait without polling).
    fn shared_polls(&self) -> u64 {
        0
    }
    /// Creates what the queue needs (table and index, consumer group) if missing.
    fn setup(&self) -> BoxFuture<'_, Result<()>>;
    /// Refuses, before it is queued, a message the storage is known to be unable to take, so
    /// that it fails alone instead of failing the batch it would be written with.
    fn check_message(&self, _message: &NewMessage) -> Result<()> {
        Ok(())
    }
    /// Stores a batch; answers each message for itself, in input order: its new id, or why it
    /// was not stored (or may not have been: the error's outcome says which). A message that
    /// was stored is never answered with an error.
    fn insert(&self, messages: Vec<NewMessage>) -> BoxFuture<'_, Vec<Result<String>>>;
    /// Claims up to `limit` due messages, oldest first, without waiting.
    fn claim(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>>;
    /// Waits while nothing is claimable: until woken, something may be due, or `cancel`.
    /// `seen` is the wake signal's value read before the claim that came back empty.
    /// Messages the wait itself claims are returned as `WaitOutcome::Claimed`, also when
    /// `cancel` fired meanwhile, never kept by the engine: only the queue's buffer is released
    /// and renewed.
    fn idle<'a>(
        &'a self,
        seen: u64,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<WaitOutcome>>;
    /// Removes messages (ack, discard); unknown ids are ignored. Returns how many fenced ones
    /// were not removed because their claim was no longer current (stale settles).
    fn delete(&self, held: Vec<Held>) -> BoxFuture<'_, Result<u64>>;
    /// Atomically replaces message `held` by `copy`; `None` if it was gone (or, fenced, no
    /// longer held by that claim).
    fn redeliver(&self, held: Held, copy: NewMessage) -> BoxFuture<'_, Result<Option<String>>>;
    /// Makes claimed-but-unhandled messages claimable by anyone at once (fenced ones only
    /// while still held).
    fn release(&self, held: Vec<Held>) -> BoxFuture<'_, Result<()>>;
    /// Renews the claims this process still holds (buffered rows, and rows whose handler
    /// runs), so that they are not taken over as abandoned. Returns the renewed ones with
    /// their new tokens; a message missing from the answer was taken over by another
    /// consumer (or settled) and is no longer this process's.
    fn keep_claimed(&self, held: Vec<Held>) -> BoxFuture<'_, Result<Vec<Held>>>;
    /// How long a claim lasts before other consumers may take the message over.
    fn claim_lease(&self) -> Duration;
    /// The most a send may take from the call to its answer, including any wait behind a
    /// batch already being written; past it the send fails, saying it may have been stored
    /// (its batch may still be written).
    fn send_bound(&self) -> Duration;
    /// The error of a send that got no answer within [`Engine::send_bound`].
    fn unanswered_send(&self) -> crate::support::error::Error;
    fn list(&self, limit: u32) -> BoxFuture<'_, Result<Vec<StoredMessage>>>;
    fn find(&self, id: String) -> BoxFuture<'_, Result<Option<StoredMessage>>>;
    fn count(&self) -> BoxFuture<'_, Result<i64>>;
    /// Lets go of this queue's share of the connections; the last one out closes them.
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

/// Why a wait ended.
#[derive(Debug, PartialEq, Eq)]
pub enum WaitOutcome {
    Woken,
    TimedOut,
    Cancelled,
    /// The wait itself claimed these (never empty): a blocking read is a wait and a claim at
    /// once. They are the queue's from here, buffered as a claim's rows even if the wait was
    /// cancelled meanwhile, so that releasing and renewing reach them.
    Claimed(Vec<StoredMessage>),
}

impl From<WaitEnd> for WaitOutcome {
    fn from(end: WaitEnd) -> Self {
        match end {
            WaitEnd::Woken => Self::Woken,
            WaitEnd::TimedOut => Self::TimedOut,
            WaitEnd::Cancelled => Self::Cancelled,
        }
    }
}

/// The same answer for each of `count` messages written as one atomic unit (one statement,
/// one transaction): they share one fate.
pub fn one_fate<R: Clone>(count: usize, result: Result<Vec<R>>) -> Vec<Result<R>> {
    match result {
        Ok(values) => values.into_iter().map(Ok).collect(),
        Err(err) => vec![Err(err); count],
    }
}

/// What the reply to a batch sent on the direct path said.
pub enum BatchReply {
    /// Each message's own answer, in order.
    Answered(Vec<Result<String>>),
    /// The batch as a whole was refused, or its reply could not be read.
    Failed(Error),
}

/// Stores a batch again on the runtime, as the same batch.
pub type Resend = Box<dyn FnOnce() -> BoxFuture<'static, Vec<Result<String>>> + Send>;

/// A batch's request as written, and what follows its reply.
pub struct Encoded {
    pub request: Vec<u8>,
    /// Run instead when the request got no answer: the batch stored on the runtime.
    pub resend: Resend,
    /// Run once the request is answered as stored: the batch is never sent again, and what
    /// only a repeat of it would read can go.
    pub stored: Box<dyn FnOnce() + Send>,
}

/// A place in a deployment's connection budget, given back when dropped.
pub type ConnectionHold = Box<dyn Send>;

/// An engine's side of the direct path.
pub trait DirectWire: Send + Sync + 'static {
    /// A place for one more send connection in the deployment's connection budget, held while
    /// the link that asked opens or keeps its connection; `None` when the budget has none
    /// left: the thread's sends then take the runtime's path, and the link asks again later.
    fn hold_connection(&self) -> Option<ConnectionHold>;
    /// Opens a connection ready for `encode`'s requests (blocking mode off).
    fn connect(&self) -> BoxFuture<'static, Result<std::net::TcpStream>>;
    /// Which connection this wire's requests may share: wires with the same key connect to
    /// the same server with the same credentials, so one connection serves them all.
    fn link_key(&self) -> u64;
    /// The request storing `messages` as one batch, how to store that batch again, and what
    /// to do once it is stored.
    fn encode(&self, messages: Vec<NewMessage>) -> Encoded;
    /// The reply at the start of `buf` to a batch of `count` and its length, `None` if
    /// incomplete; an error if the bytes are no reply at all.
    fn read_reply(&self, buf: &[u8], count: usize) -> Result<Option<(BatchReply, usize)>>;
}
