//! Writes to a stream: sends (due entries by a transaction that marks the batch stored, and
//! any repeat of it by a script that finds that mark, so a batch is stored once however often
//! it is sent; delayed ones all in one script call, scored on Redis's clock; each part answered
//! for itself), rejects (the copy and the removal of the original in one script) and acks (XACK
//! and XDEL in one MULTI).
//! Invariant: each write is one pipeline, script or transaction per attempt, and a reject
//! copies only an entry still pending in the group, so repeating one after a lost reply makes
//! no second copy.

use super::replies::as_string;
use super::send_batch::{first_refusal, SendBatch, SENT_MARKER_TTL_MS, STORED_BY_TRANSACTION};
use super::stream::Stream;
use crate::queue::engine::NewMessage;
use crate::support::backoff::Backoff;
use crate::support::error::{Error, Outcome, Result};
use crate::support::locks::Locked;
use redis::{Script, Value};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

static INSERT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/insert.lua")));
static ADD_DELAYED: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/add_delayed.lua")));
static REDELIVER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/redeliver.lua")));
static SETTLE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/settle.lua")));

/// A failed attempt at storing a batch.
pub(super) struct InsertFailure {
    pub error: Error,
    /// The connection was found closed (reset, end of stream, broken pipe), as a connection
    /// the server dropped while it sat idle fails the first command sent on it. A timeout is
    /// not this: the commands may have run.
    pub dropped: bool,
    /// A batch of one command was answered by a cluster redirect (MOVED, ASK, TRYAGAIN,
    /// CLUSTERDOWN) the client did not follow through: it did not run, and may be sent again
    /// once the slot has settled.
    pub redirected: bool,
}

impl InsertFailure {
    /// Whether the part whose attempt failed so may be sent once more: only when the
    /// connection was found closed, not already after a repeat, and when a copy the failed
    /// attempt may have stored would be found rather than stored twice (`repeatable`).
    pub(super) fn may_send_again(&self, repeatable: bool, resent: bool) -> bool {
        self.dropped && !resent && repeatable
    }
}

impl From<Error> for InsertFailure {
    fn from(error: Error) -> Self {
        Self {
            error,
            dropped: false,
            redirected: false,
        }
    }
}

/// The two parts of a batch of sends, written apart so that one failing cannot hide the
/// other's outcome: due messages go to the stream, delayed ones to the delayed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Due,
    Delayed,
}

/// The writing side of one stream: sends, redeliveries and settles.
pub(super) struct Writer {
    pub(super) stream: Arc<Stream>,
    /// Markers of this stream's batches that no send will read again, waiting to be deleted
    /// a full set at a time (`forget_marker`).
    spent_markers: super::spent_markers::SpentMarkers,
    /// The names this stream's batch markers get.
    pub(super) marker_names: super::send_batch::MarkerNames,
}

impl Writer {
    pub(super) fn new(stream: Arc<Stream>) -> Self {
        Self {
            marker_names: super::send_batch::MarkerNames::for_stream(&stream.config),
            spent_markers: Default::default(),
            stream,
        }
    }

    /// Stores `batch` (attempts at one batch are the same batch: see `SendBatch`), answering
    /// each message for itself: the due part and the delayed part are written apart (each
    /// all or nothing), so a delayed set of another type, say, fails only the delayed sends.
    pub(super) async fn insert_batch(
        &self,
        messages: &[NewMessage],
        mut batch: SendBatch,
    ) -> Vec<Result<String>> {
        let (due, delayed): (Vec<usize>, Vec<usize>) =
            (0..messages.len()).partition(|&i| messages[i].delay_ms <= 0.0);
        let mut answers: Vec<Result<String>> = Vec::with_capacity(messages.len());
        answers.resize_with(messages.len(), || Ok(String::new()));
        for (part, slots) in [(Part::Due, due), (Part::Delayed, delayed)] {
            if slots.is_empty() {
                continue;
            }
            let part_messages: Vec<&NewMessage> = slots.iter().map(|&i| &messages[i]).collect();
            let nonces: Vec<String> = slots
                .iter()
                .filter_map(|&i| batch.nonces[i].clone())
                .collect();
            let stored = self
                .store_part(part, &part_messages, &nonces, &mut batch)
                .await;
            match stored {
                Ok(ids) => {
                    for (slot, id) in slots.into_iter().zip(ids) {
                        answers[slot] = Ok(id);
                    }
                    if part == Part::Delayed {
                        self.expect_delayed(&part_messages);
                    }
                }
                Err(err) => {
                    for slot in slots {
                        answers[slot] = Err(err.clone());
                    }
                }
            }
        }
        // One WAIT for the whole batch, after both parts: it covers every write before it.
        if answers.iter().any(Result::is_ok) {
            if let Err(err) = self.replicated().await {
                for answer in answers.iter_mut().filter(|a| a.is_ok()) {
                    *answer = Err(err.clone());
                }
            }
        }
        answers
    }

    /// Stores one part of a batch. A connection found closed (the server dropped it while
    /// idle: a restart, a CLIENT KILL; or just after it ran the part) is re-made and the same
    /// part sent once more, if a first copy would be found (the due part's marker, the delayed
    /// members' nonces): then it is stored once however often it is sent. Otherwise (a
    /// cluster's XADDs), and after a timeout (the server may still be working on it), the error
    /// says it may have been stored. A redirect proves the command did not run: it is sent
    /// again, with backoff, while a migrating slot settles (the client follows only a couple by
    /// itself).
    async fn store_part(
        &self,
        part: Part,
        messages: &[&NewMessage],
        nonces: &[String],
        batch: &mut SendBatch,
    ) -> Result<Vec<String>> {
        // How often a one-command send answered by a cluster redirect is sent again, and the
        // pauses between (about 0.3 s in all: a slot's keys move in milliseconds).
        const MAX_REDIRECT_RESENDS: u32 = 5;
        const REDIRECT_PAUSE: Duration = Duration::from_millis(10);
        const MAX_REDIRECT_PAUSE: Duration = Duration::from_millis(160);
        let mut redirects = Backoff::new(REDIRECT_PAUSE, MAX_REDIRECT_PAUSE);
        let (mut redirected, mut resent, mut first) = (0, false, true);
        // Delayed members carry their nonces: a repeat adds each once.
        let repeatable = part == Part::Delayed || batch.marker.is_some();
        loop {
            let attempt = match part {
                Part::Due => self.due_once(messages, batch).await,
                Part::Delayed => self.delayed_once(messages, nonces).await,
            };
            if part == Part::Due {
                batch.tried = true;
            }
            match attempt {
                Ok(ids) => {
                    if let (Part::Due, true, Some(marker)) = (part, first, batch.marker.take()) {
                        // Answered at its first attempt: never sent again, so never read.
                        self.forget_marker(marker);
                    }
                    return Ok(ids);
                }
                Err(failure) if failure.redirected && redirected < MAX_REDIRECT_RESENDS => {
                    redirected += 1;
                    tokio::time::sleep(redirects.next_pause()).await;
                }
                Err(failure)
                    if failure.may_send_again(repeatable, resent)
                        && self.stream.contacted.load(Ordering::Acquire) =>
                {
                    resent = true;
                }
                Err(failure) => return Err(failure.error),
            }
            first = false;
        }
    }

    /// Waits until the writes made on the command connection so far have reached the replicas
    /// `waitForReplicas` asks for (`WAIT`, bounded by the connect timeout): a write the replicas
    /// did not acknowledge in time is on the master only, and may be lost in a hard failover.
    async fn replicated(&self) -> Result<()> {
        let wanted = self.stream.config.wait_for_replicas;
        if wanted == 0 {
            return Ok(());
        }
        // Within the reply bound of the command connection (the connect timeout), so that the
        // server answers with how many acknowledged before the client gives up on it.
        let timeout = self.stream.shared.connect_timeout * 3 / 4;
        let mut conn = self.stream.conn("send").await?;
        let acknowledged: i64 = redis::cmd("WAIT")
            .arg(wanted)
            .arg(timeout.as_millis() as u64)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.stream.err("send", &e).with_outcome(Outcome::Unknown))?;
        if acknowledged >= i64::from(wanted) {
            return Ok(());
        }
        Err(Error::connection(format!(
            "Redis transport failed during \"send\": stored on the master, but {acknowledged} of the {wanted} replica(s) waitForReplicas asks for acknowledged it within {} ms (it may be lost if the master fails now; not sent again)",
            timeout.as_millis()
        ))
        .caused_by(crate::support::error::Cause::timed_out(format!(
            "WAIT {wanted} answered {acknowledged}"
        )))
        .with_outcome(Outcome::Unknown))
    }

    /// A blocked read of this instance re-plans its wait around the new delayed members.
    fn expect_delayed(&self, delayed: &[&NewMessage]) {
        let Some(earliest) = delayed.iter().map(|m| m.delay_ms).reduce(f64::min) else {
            return;
        };
        let due = crate::support::durations::millis(earliest);
        let mut next_due = self.stream.next_due.locked();
        *next_due = Some(next_due.map_or(due, |known| known.min(due)));
        drop(next_due);
        self.stream.delayed_added.wake();
    }

    /// Notes the marker of a batch answered at its first attempt (never read again), and
    /// deletes a full set of such markers in the background: one `DEL` on the command
    /// connection if it is open, bounded by the connect timeout, its outcome awaited by no
    /// send (a marker it does not delete expires).
    pub(super) fn forget_marker(&self, marker: String) {
        let Some(keys) = self.spent_markers.note(marker) else {
            return;
        };
        let shared = self.stream.shared.clone();
        napi::bindgen_prelude::spawn(async move {
            let delete = async {
                let mut conn = shared.open_conn().await?;
                redis::cmd("DEL")
                    .arg(keys)
                    .query_async::<i64>(&mut conn)
                    .await
                    .ok()
            };
            let _ = tokio::time::timeout(shared.connect_timeout, delete).await;
        });
    }

    /// What a failed send command means for its part of the batch: a redirect of a lone
    /// command did not run it; a connection failure leaves it unknown (and, when the
    /// connection was found closed, worth one repeat); anything else is the server's refusal.
    fn send_failure(&self, e: &redis::RedisError, one_command: bool) -> InsertFailure {
        let error = self.stream.err("send", e);
        if one_command && e.is_cluster_error() {
            InsertFailure {
                error: Error {
                    message: format!(
                        "{} (the cluster kept redirecting the send: nothing was stored)",
                        error.message
                    ),
                    ..error
                }
                .with_outcome(Outcome::NotApplied),
                dropped: false,
                redirected: true,
            }
        } else if error.is_transient_connection() {
            InsertFailure {
                error: Error {
                    message: format!(
                        "{} (the connection was lost with the outcome unknown: the messages may have been stored)",
                        error.message
                    ),
                    ..error
                }
                .with_outcome(Outcome::Unknown),
                dropped: e.is_connection_dropped() && !e.is_timeout(),
                redirected: false,
            }
        } else {
            error.into()
        }
    }

    /// One attempt at storing the due part: by a transaction that marks the batch stored, or
    /// by the script that finds that mark when the attempt is a repeat (or, for a stream no
    /// marker key can share a cluster slot with, one pipeline of XADDs).
    async fn due_once(
        &self,
        due: &[&NewMessage],
        batch: &SendBatch,
    ) -> std::result::Result<Vec<String>, InsertFailure> {
        let mut conn = self.stream.conn("send").await?;
        // A redirect (MOVED, ASK, TRYAGAIN, CLUSTERDOWN: the slot is migrating) answers a command
        // instead of running it: a batch of one command that got one was not applied and may be
        // sent again. (A longer pipeline may have run its first commands before the key moved.)
        let one_command = due.len() == 1 && batch.marker.is_none();
        match &batch.marker {
            Some(marker) if batch.tried => self.add_once(&mut conn, marker, due).await,
            Some(marker) => self.add_marked(&mut conn, marker, due).await,
            None => self.add_each(&mut conn, due).await,
        }
        .map_err(|e| self.send_failure(&e, one_command))
    }

    /// One attempt at storing the delayed part: every member in one script call, scored on
    /// Redis's clock (a key of another type fails its first `ZADD`, before anything is added);
    /// a member already there (its first reply was lost) keeps its first score. Answers the
    /// members' nonces.
    async fn delayed_once(
        &self,
        delayed: &[&NewMessage],
        nonces: &[String],
    ) -> std::result::Result<Vec<String>, InsertFailure> {
        let mut conn = self.stream.conn("send").await?;
        let mut add = ADD_DELAYED.key(&self.stream.config.delay_key);
        for (m, nonce) in delayed.iter().zip(nonces) {
            add.arg(m.delay_ms.ceil() as u64)
                .arg(self.delayed_member(nonce, &m.body, &m.headers)?);
        }
        add.invoke_async::<i64>(&mut conn)
            .await
            .map_err(|e| self.send_failure(&e, true))?;
        Ok(nonces.to_vec())
    }

    /// One attempt at a reject (the script gates on the original still being pending, so a
    /// repeat after a lost reply makes no second copy).
    pub(super) async fn redeliver_once(
        &self,
        id: &str,
        copy: &NewMessage,
    ) -> Result<Option<String>> {
        let mut conn = self.stream.conn("reject").await?;
        let nonce = uuid::Uuid::new_v4().to_string();
        let member = self.delayed_member(&nonce, &copy.body, &copy.headers)?;
        let reply: Value = REDELIVER
            .key(&self.stream.config.stream)
            .key(&self.stream.config.delay_key)
            .arg(&self.stream.config.group)
            .arg(id)
            .arg(&copy.body)
            .arg(&copy.headers)
            .arg(copy.delay_ms.max(0.0).ceil() as u64)
            .arg(member)
            .arg(&nonce)
            .arg(&self.stream.config.consumer)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.stream.err("reject", &e))?;
        Ok(as_string(&reply))
    }

    /// Stores due messages through the script that stores a batch once (see `SendBatch`).
    async fn add_once(
        &self,
        conn: &mut super::connection::Conn,
        marker: &str,
        due: &[&NewMessage],
    ) -> redis::RedisResult<Vec<String>> {
        let mut insert = INSERT.key(&self.stream.config.stream);
        insert.key(marker).arg(SENT_MARKER_TTL_MS);
        for m in due {
            insert.arg(&m.body).arg(&m.headers);
        }
        insert.invoke_async(conn).await
    }

    /// A first attempt at storing due messages: one transaction of their XADDs that marks the
    /// batch stored (see `transaction_request`; a repeat goes through `add_once`).
    async fn add_marked(
        &self,
        conn: &mut super::connection::Conn,
        marker: &str,
        due: &[&NewMessage],
    ) -> redis::RedisResult<Vec<String>> {
        let mut pipe = self.xadds(due);
        pipe.atomic()
            .cmd("SET")
            .arg(marker)
            .arg(STORED_BY_TRANSACTION)
            .arg("PX")
            .arg(SENT_MARKER_TTL_MS)
            .ignore();
        pipe.query_async(conn).await.map_err(first_refusal)
    }

    /// Stores due messages as one pipeline of XADDs (a repeat would store them again).
    async fn add_each(
        &self,
        conn: &mut super::connection::Conn,
        due: &[&NewMessage],
    ) -> redis::RedisResult<Vec<String>> {
        if let [m] = due {
            // One command, not a pipeline of one: the cluster client follows a redirect for a
            // command by itself, while one for a pipeline may come back mid-migration.
            let id: String = redis::cmd("XADD")
                .arg(&self.stream.config.stream)
                .arg("*")
                .arg("body")
                .arg(&m.body)
                .arg("headers")
                .arg(&m.headers)
                .query_async(conn)
                .await?;
            return Ok(vec![id]);
        }
        self.xadds(due).query_async(conn).await
    }

    /// A pipeline of one XADD per message, in order.
    fn xadds(&self, due: &[&NewMessage]) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        for m in due {
            pipe.cmd("XADD")
                .arg(&self.stream.config.stream)
                .arg("*")
                .arg("body")
                .arg(&m.body)
                .arg("headers")
                .arg(&m.headers);
        }
        pipe
    }

    pub(super) fn delayed_member(&self, nonce: &str, body: &str, headers: &str) -> Result<String> {
        // Key order nonce, body, headers, as upstream writes it.
        let quote = |s: &str| serde_json::to_string(s).map_err(|e| Error::transport(e.to_string()));
        Ok(format!(
            "{{\"nonce\":{},\"body\":{},\"headers\":{}}}",
            quote(nonce)?,
            quote(body)?,
            quote(headers)?
        ))
    }

    /// Acks and deletes the entries of `ids` still pending for this consumer (fenced acks);
    /// returns how many that was.
    pub(super) async fn settle_own(&self, ids: &[String], op: &str) -> Result<u64> {
        let Some((first, last)) = id_range(ids) else {
            return Ok(0);
        };
        let mut conn = self.stream.conn(op).await?;
        let settled: i64 = SETTLE
            .key(&self.stream.config.stream)
            .arg(&self.stream.config.group)
            .arg(&self.stream.config.consumer)
            .arg(first)
            .arg(last)
            .arg(ids)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.stream.err(op, &e))?;
        Ok(settled.max(0) as u64)
    }
}

/// The lowest and highest of stream ids `ids` (`<ms>-<seq>`, compared as numbers).
fn id_range(ids: &[String]) -> Option<(&str, &str)> {
    let key = |id: &String| {
        let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
        (
            ms.parse::<u64>().unwrap_or(0),
            seq.parse::<u64>().unwrap_or(0),
        )
    };
    let first = ids.iter().min_by_key(|id| key(id))?;
    let last = ids.iter().max_by_key(|id| key(id))?;
    Some((first, last))
}

#[cfg(test)]
mod tests {
    use super::{id_range, InsertFailure};
    use crate::support::error::Error;

    fn dropped() -> InsertFailure {
        InsertFailure {
            dropped: true,
            ..InsertFailure::from(Error::connection("reset"))
        }
    }

    #[test]
    fn a_part_found_dropped_is_sent_again_once_when_its_first_copy_would_be_found() {
        assert!(dropped().may_send_again(true, false));
        assert!(!dropped().may_send_again(true, true));
        // A cluster's XADDs: a repeat would store them twice.
        assert!(!dropped().may_send_again(false, false));
        let timed_out: InsertFailure = Error::connection("timeout").into();
        assert!(!timed_out.may_send_again(true, false));
    }

    #[test]
    fn id_ranges_compare_stream_ids_as_numbers() {
        let ids: Vec<String> = ["10-2", "9-5", "10-10", "10-1"].map(String::from).to_vec();
        assert_eq!(id_range(&ids), Some(("9-5", "10-10")));
        assert_eq!(id_range(&[]), None);
    }
}
