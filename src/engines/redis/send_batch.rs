//! A batch of sends as its first attempt writes it: what makes the attempts at one batch the
//! same batch (its marker key beside the stream, its delayed members' nonces), the bytes of the
//! transaction that stores it and marks it stored, and what that transaction's replies say.
//! No I/O: `writes` sends it and repeats it; `direct` writes it on the JavaScript thread.

use crate::queue::engine::NewMessage;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

/// How long the marker of a stored batch is kept: a batch is sent again at once or never.
pub(super) const SENT_MARKER_TTL_MS: u64 = 60_000;

/// What makes the attempts at one batch the same batch: the key its due messages are marked
/// stored under, and the nonces of its delayed ones. A repeat of an attempt whose reply was
/// lost then stores nothing twice: the script finds the marker, the delayed members exist.
pub(super) struct SendBatch {
    pub(super) marker: Option<String>,
    /// An attempt at this batch has gone out: any further one must find what it stored, so
    /// its due messages go through the insert script rather than a first transaction.
    pub(super) tried: bool,
    /// Per message: its nonce if it is delayed (due ones need none: the marker covers them).
    pub(super) nonces: Vec<Option<String>>,
}

/// The names of one stream's batch markers: a key beside the stream ending in this process's
/// random id, worked out once per queue, then a counter. A name no other batch has, made
/// with one allocation per send (one random draw per process, each draw being a system
/// call). The prefix must hash by a tag that closes before the counter, so that the counter
/// cannot move a name off the stream's slot (`slot::beside` makes one unless the stream's
/// name defeats it, e.g. one that starts with `}`: such a stream gets no markers).
pub(super) struct MarkerNames {
    /// `None` on a cluster, or where no simple key shares the stream's slot.
    prefix: Option<String>,
}

impl MarkerNames {
    pub(super) fn for_stream(config: &super::StreamConfig) -> Self {
        static PROCESS: LazyLock<uuid::Uuid> = LazyLock::new(uuid::Uuid::new_v4);
        let prefix = if config.connect.cluster {
            // While the stream's slot migrates, a script over the stream and a marker that is
            // not there yet is refused (TRYAGAIN) until the move ends, holding sends up; there
            // a batch goes as one pipeline of XADDs, as upstream sends.
            None
        } else {
            config.beside(&format!("sent:{}-", *PROCESS)).filter(|key| {
                key.strip_prefix(config.key_prefix.as_str())
                    .is_some_and(super::slot::is_tagged)
            })
        };
        Self { prefix }
    }

    /// Whether this stream's batches get markers (and so can be sent again safely).
    pub(super) fn available(&self) -> bool {
        self.prefix.is_some()
    }

    fn next(&self) -> Option<String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let prefix = self.prefix.as_deref()?;
        let mut count = itoa::Buffer::new();
        let count = count.format(NEXT.fetch_add(1, Ordering::Relaxed));
        let mut name = String::with_capacity(prefix.len() + count.len());
        name.push_str(prefix);
        name.push_str(count);
        Some(name)
    }
}

impl SendBatch {
    /// A new batch: its marker's name (if its stream has markers) and its delayed messages'
    /// nonces.
    pub(super) fn new(names: &MarkerNames, messages: &[NewMessage]) -> Self {
        let nonces = messages
            .iter()
            .map(|m| (m.delay_ms > 0.0).then(|| uuid::Uuid::new_v4().to_string()))
            .collect();
        Self {
            marker: names.next(),
            tried: false,
            nonces,
        }
    }

    /// Notes that an attempt at this batch went out (its outcome unknown until answered).
    pub(super) fn tried(mut self) -> Self {
        self.tried = true;
        self
    }
}

/// What a transaction's first attempt at a batch leaves under the batch's marker: the batch
/// was stored, by entries the transaction did not record (the insert script records ids).
pub(super) const STORED_BY_TRANSACTION: &str = "*";

/// The first attempt at storing the due `messages` of `batch` (which has a marker) as one
/// transaction, as the bytes sent: `MULTI`, an `XADD` per message, the marker's `SET`,
/// `EXEC`. Cheaper for the server than the insert script (no script to run, no `GET`), and
/// as safe to repeat: a repeat goes through the insert script, which finds the marker and
/// the entries the transaction stored. Its replies are read by `transaction_outcome`.
pub(super) fn transaction_request(
    stream: &str,
    batch: &SendBatch,
    messages: &[NewMessage],
) -> Vec<u8> {
    use super::resp::push_command;
    let size: usize = messages
        .iter()
        .map(|m| m.body.len() + m.headers.len() + stream.len() + 64)
        .sum();
    let mut request = Vec::with_capacity(size + 128);
    push_command(&mut request, &[b"MULTI"]);
    for m in messages {
        push_command(
            &mut request,
            &[
                b"XADD",
                stream.as_bytes(),
                b"*",
                b"body",
                m.body.as_bytes(),
                b"headers",
                m.headers.as_bytes(),
            ],
        );
    }
    let marker = batch.marker.as_deref().unwrap_or_default();
    let mut ttl = itoa::Buffer::new();
    let ttl = ttl.format(SENT_MARKER_TTL_MS);
    push_command(
        &mut request,
        &[
            b"SET",
            marker.as_bytes(),
            STORED_BY_TRANSACTION.as_bytes(),
            b"PX",
            ttl.as_bytes(),
        ],
    );
    push_command(&mut request, &[b"EXEC"]);
    request
}

/// How many replies a transaction of `count` messages gets: `MULTI`'s, one per queued
/// command (the `XADD`s and the marker's `SET`), and `EXEC`'s.
pub(super) fn transaction_replies(count: usize) -> usize {
    count + 3
}

/// What the replies to a transaction of `count` messages say. A command refused while queued
/// (an out-of-memory or ACL refusal) makes the server discard the whole transaction:
/// nothing ran, and the first refusal is the answer. Otherwise `EXEC` answers each command
/// in order, and each message for itself: its entry's id, or the error its `XADD` met (a key
/// of another type). The marker's own answer is not a message's.
pub(super) fn transaction_outcome(
    replies: Vec<super::resp::Reply>,
    count: usize,
) -> std::result::Result<Vec<std::result::Result<String, TransactionError>>, TransactionError> {
    use super::resp::Reply;
    let mut replies = replies.into_iter();
    let exec = replies.next_back();
    if let Some(refused) = replies.find_map(|r| match r {
        Reply::Error(text) => Some(text),
        _ => None,
    }) {
        return Err(TransactionError::Server(refused));
    }
    match exec {
        Some(Reply::Array(Some(mut answers))) if answers.len() == count + 1 => {
            answers.truncate(count);
            Ok(answers
                .into_iter()
                .map(|answer| match answer {
                    Reply::Bulk(Some(id)) => {
                        String::from_utf8(id).map_err(|_| TransactionError::Unexpected)
                    }
                    Reply::Error(text) => Err(TransactionError::Server(text)),
                    _ => Err(TransactionError::Unexpected),
                })
                .collect())
        }
        Some(Reply::Error(text)) => Err(TransactionError::Server(text)),
        _ => Err(TransactionError::Unexpected),
    }
}

/// A transaction the server discarded because it refused a command while queuing it
/// (`EXECABORT`) stored nothing, and the first refusal says why: `LOADING` after a restart,
/// `OOM`, an ACL. Answered as that refusal, it is classified as the same command alone would
/// be (a server still loading is a connection failure, as for any command, not a failed send).
pub(super) fn first_refusal(error: redis::RedisError) -> redis::RedisError {
    if error.kind() != redis::ErrorKind::Server(redis::ServerErrorKind::ExecAbort) {
        return error;
    }
    match error.clone().into_server_errors().as_deref() {
        Some([(_, first), ..]) => first.clone().into(),
        _ => error,
    }
}

/// Why a transaction, or one of its commands, stored nothing.
#[derive(Debug, PartialEq)]
pub(super) enum TransactionError {
    /// The server's error reply, as it sent it (without the leading `-`).
    Server(String),
    /// A reply no transaction of the request's shape gets.
    Unexpected,
}

#[cfg(test)]
pub(super) mod tests {
    use super::{
        transaction_outcome, transaction_replies, MarkerNames, SendBatch, TransactionError,
    };
    use crate::queue::engine::NewMessage;

    pub(in super::super) fn message(delay_ms: f64) -> NewMessage {
        NewMessage::new("{}".to_owned(), "{}".to_owned(), delay_ms)
    }

    fn config(key_prefix: &str, stream: &str, cluster: bool) -> super::super::StreamConfig {
        super::super::StreamConfig {
            key_prefix: key_prefix.to_owned(),
            stream: format!("{key_prefix}{stream}"),
            group: "g".to_owned(),
            consumer: "c".to_owned(),
            delay_key: format!("{key_prefix}{stream}:delayed"),
            claim_idle: std::time::Duration::from_secs(30),
            poll_interval: std::time::Duration::from_millis(50),
            connect: super::super::connection::ConnectOptions {
                cluster,
                ..Default::default()
            },
            max_connections: None,
            wait_for_replicas: 0,
        }
    }

    pub(in super::super) fn names(key_prefix: &str, stream: &str, cluster: bool) -> MarkerNames {
        MarkerNames::for_stream(&config(key_prefix, stream, cluster))
    }

    #[test]
    fn a_batch_marker_starts_with_the_key_prefix() {
        for (prefix, stream, start) in [
            ("app:", "messenger:s", "app:{messenger:s}:sent:"),
            ("app:", "messenger:{s}", "app:messenger:{s}:sent:"),
            ("", "plain", "{plain}:sent:"),
        ] {
            let batch = SendBatch::new(&names(prefix, stream, false), &[message(0.0)]);
            let marker = batch.marker.expect("a marker on a single node");
            assert!(marker.starts_with(start), "{marker}");
        }
    }

    #[test]
    fn every_batch_marker_is_new_and_shares_its_streams_slot() {
        use super::super::slot::slot;
        for stream in [
            "messages",
            "messenger:{orders}",
            "a:{b}:c",
            "a{b",
            "a{}b",
            "x}y",
            "}x",
        ] {
            let names = names("", stream, false);
            let markers: Vec<String> = (0..3)
                .filter_map(|_| SendBatch::new(&names, &[message(0.0)]).marker)
                .collect();
            assert_eq!(
                markers.len(),
                if names.available() { 3 } else { 0 },
                "{stream}"
            );
            for marker in &markers {
                assert_eq!(slot(marker), slot(stream), "{marker}");
            }
            assert!(
                markers.windows(2).all(|pair| pair[0] != pair[1]),
                "{markers:?}"
            );
        }
        assert!(names("", "messages", false).available());
        assert!(names("app:", "messenger:{s}", false).available());
        assert!(!names("", "}x", false).available());
        assert!(!names("", "messenger:{s}", true).available());
    }

    #[test]
    fn a_transaction_answers_its_ids_or_what_refused_it() {
        use crate::engines::redis::resp::Reply;
        let queued = || Reply::Simple("QUEUED".into());
        let ok = || Reply::Simple("OK".into());
        let id = |s: &str| Reply::Bulk(Some(s.as_bytes().to_vec()));
        let stored = vec![
            ok(),
            queued(),
            queued(),
            queued(),
            Reply::Array(Some(vec![id("1-0"), id("1-1"), ok()])),
        ];
        assert_eq!(
            transaction_outcome(stored, 2),
            Ok(vec![Ok("1-0".to_owned()), Ok("1-1".to_owned())])
        );
        let refused = vec![
            ok(),
            Reply::Error("OOM command not allowed".into()),
            queued(),
            Reply::Error("EXECABORT Transaction discarded".into()),
        ];
        assert_eq!(
            transaction_outcome(refused, 1),
            Err(TransactionError::Server("OOM command not allowed".into()))
        );
        let wrong_type = vec![
            ok(),
            queued(),
            queued(),
            queued(),
            Reply::Array(Some(vec![
                Reply::Error("WRONGTYPE".into()),
                id("1-1"),
                ok(),
            ])),
        ];
        // Each message is answered for itself.
        assert_eq!(
            transaction_outcome(wrong_type, 2),
            Ok(vec![
                Err(TransactionError::Server("WRONGTYPE".into())),
                Ok("1-1".to_owned())
            ])
        );
        let short = vec![ok(), queued(), queued(), Reply::Array(Some(vec![ok()]))];
        assert_eq!(
            transaction_outcome(short, 1),
            Err(TransactionError::Unexpected)
        );
        assert_eq!(transaction_replies(2), 5);
    }
}
