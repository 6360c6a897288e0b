//! Writes to a stream: sends (due entries by a transaction that marks the batch stored, and
//! any repeat of it by a script that finds that mark, so a batch is stored once however often
//! it is sent; delayed ones scored on Redis's clock by a script), rejects (the copy and the
//! removal of the original in one script) and acks (XACK and XDEL in one MULTI).
//! Invariant: each write is one pipeline, script or transaction per attempt, and a reject
//! copies only an entry still pending in the group, so repeating one after a lost reply makes
//! no second copy.

use super::replies::as_string;
use super::send_batch::{first_refusal, SendBatch, SENT_MARKER_TTL_MS, STORED_BY_TRANSACTION};
use super::stream_queue::RedisQueue;
use crate::queue::engine::NewMessage;
use crate::support::backoff::Backoff;
use crate::support::error::{Error, Result};
use redis::{Script, Value};
use std::sync::atomic::Ordering;
use std::sync::LazyLock;
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
    /// Whether the batch whose attempt failed so may be sent once more: only when the
    /// connection was found closed, not already after a repeat, and when a copy the failed
    /// attempt may have stored would be found rather than stored twice.
    pub(super) fn may_send_again(&self, batch: &SendBatch, resent: bool) -> bool {
        self.dropped && !resent && batch.repeatable()
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

impl RedisQueue {
    /// Stores `batch` (attempts at one batch are the same batch: see `SendBatch`).
    pub(super) async fn insert_batch(
        &self,
        messages: &[NewMessage],
        mut batch: SendBatch,
    ) -> Result<Vec<String>> {
        // A connection found closed (the server dropped it while idle: a restart, a
        // CLIENT KILL; or just after it ran the batch) is re-made and the same batch sent
        // once more, if a first copy would be found (see `SendBatch::repeatable`): then it is
        // stored once however often it is sent. Otherwise (a cluster's XADDs), and after a
        // timeout (the server may still be working on it), the error says it may have been
        // stored.
        // A redirect proves the command did not run: it is sent again, with backoff,
        // while a migrating slot settles (the client follows only a couple by itself).
        // How often a one-command send answered by a cluster redirect is sent again, and the
        // pauses between (about 0.3 s in all: a slot's keys move in milliseconds).
        const MAX_REDIRECT_RESENDS: u32 = 5;
        const REDIRECT_PAUSE: Duration = Duration::from_millis(10);
        const MAX_REDIRECT_PAUSE: Duration = Duration::from_millis(160);
        let mut redirects = Backoff::new(REDIRECT_PAUSE, MAX_REDIRECT_PAUSE);
        let (mut redirected, mut resent) = (0, false);
        let ids = loop {
            let first = !batch.tried;
            let attempt = self.insert_once(messages, &batch).await;
            batch.tried = true;
            match attempt {
                Ok(ids) => {
                    if let (true, Some(marker)) = (first, batch.marker.take()) {
                        // Answered at its first attempt: never sent again, so never read.
                        self.forget_marker(marker);
                    }
                    break ids;
                }
                Err(failure) if failure.redirected && redirected < MAX_REDIRECT_RESENDS => {
                    redirected += 1;
                    tokio::time::sleep(redirects.next_pause()).await;
                }
                Err(failure)
                    if failure.may_send_again(&batch, resent)
                        && self.contacted.load(Ordering::Acquire) =>
                {
                    resent = true;
                }
                Err(failure) => return Err(failure.error),
            }
        };
        if let Some(earliest) = messages
            .iter()
            .filter(|m| m.delay_ms > 0.0)
            .map(|m| m.delay_ms)
            .reduce(f64::min)
        {
            // A blocked read of this instance re-plans its wait around the new member.
            let due = crate::support::durations::millis(earliest);
            let mut next_due = self.next_due.lock().unwrap_or_else(|p| p.into_inner());
            *next_due = Some(next_due.map_or(due, |known| known.min(due)));
            drop(next_due);
            self.delayed_added.wake();
        }
        Ok(ids)
    }

    /// Notes the marker of a batch answered at its first attempt (never read again), and
    /// deletes a full set of such markers in the background: one `DEL` on the command
    /// connection if it is open, bounded by the connect timeout, its outcome awaited by no
    /// send (a marker it does not delete expires).
    pub(super) fn forget_marker(&self, marker: String) {
        let Some(keys) = self.spent_markers.note(marker) else {
            return;
        };
        let shared = self.shared.clone();
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

    /// One attempt at storing `batch`: due messages by a transaction that marks the batch
    /// stored, or by the script that finds that mark when the attempt is a repeat (or, for a
    /// stream no marker key can share a cluster slot with, one pipeline of XADDs), delayed ones
    /// through the script that scores them on Redis's clock. A connection lost once the
    /// commands went out leaves their outcome unknown: the error says they may have been
    /// stored.
    pub(super) async fn insert_once(
        &self,
        messages: &[NewMessage],
        batch: &SendBatch,
    ) -> std::result::Result<Vec<String>, InsertFailure> {
        let mut conn = self.conn("send").await?;
        // A redirect (MOVED, ASK, TRYAGAIN, CLUSTERDOWN: the slot is migrating) answers a command
        // instead of running it: a batch of one command that got one was not applied and may be
        // sent again. (A longer pipeline may have run its first commands before the key moved.)
        let one_command = messages.len() == 1;
        let sent = |e: &redis::RedisError| {
            let error = self.err("send", e);
            if one_command && e.is_cluster_error() {
                InsertFailure {
                    error: Error {
                        message: format!(
                            "{} (the cluster kept redirecting the send: nothing was stored)",
                            error.message
                        ),
                        ..error
                    },
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
                    },
                    dropped: e.is_connection_dropped() && !e.is_timeout(),
                    redirected: false,
                }
            } else {
                error.into()
            }
        };
        let mut ids: Vec<Option<String>> = vec![None; messages.len()];
        let immediate: Vec<usize> = (0..messages.len())
            .filter(|&i| messages[i].delay_ms <= 0.0)
            .collect();
        if !immediate.is_empty() {
            let due: Vec<&NewMessage> = immediate.iter().map(|&i| &messages[i]).collect();
            let added: Vec<String> = match &batch.marker {
                Some(marker) if batch.tried => self.add_once(&mut conn, marker, &due).await,
                Some(marker) => self.add_marked(&mut conn, marker, &due).await,
                None => self.add_each(&mut conn, &due).await,
            }
            .map_err(|e| sent(&e))?;
            for (slot, id) in immediate.into_iter().zip(added) {
                ids[slot] = Some(id);
            }
        }
        for (i, m) in messages.iter().enumerate() {
            // Only delayed messages have a nonce.
            let Some(nonce) = batch.nonces[i].as_deref() else {
                continue;
            };
            let member = self.delayed_member(nonce, &m.body, &m.headers)?;
            ADD_DELAYED
                .key(&self.config.delay_key)
                .arg(m.delay_ms.ceil() as u64)
                .arg(member)
                .invoke_async::<i64>(&mut conn)
                .await
                .map_err(|e| sent(&e))?;
            ids[i] = Some(nonce.to_owned());
        }
        Ok(ids.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// One attempt at a reject (the script gates on the original still being pending, so a
    /// repeat after a lost reply makes no second copy).
    pub(super) async fn redeliver_once(
        &self,
        id: &str,
        copy: &NewMessage,
    ) -> Result<Option<String>> {
        let mut conn = self.conn("reject").await?;
        let nonce = uuid::Uuid::new_v4().to_string();
        let member = self.delayed_member(&nonce, &copy.body, &copy.headers)?;
        let reply: Value = REDELIVER
            .key(&self.config.stream)
            .key(&self.config.delay_key)
            .arg(&self.config.group)
            .arg(id)
            .arg(&copy.body)
            .arg(&copy.headers)
            .arg(copy.delay_ms.max(0.0).ceil() as u64)
            .arg(member)
            .arg(&nonce)
            .arg(&self.config.consumer)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.err("reject", &e))?;
        Ok(as_string(&reply))
    }

    /// Stores due messages through the script that stores a batch once (see `SendBatch`).
    async fn add_once(
        &self,
        conn: &mut super::connection::Conn,
        marker: &str,
        due: &[&NewMessage],
    ) -> redis::RedisResult<Vec<String>> {
        let mut insert = INSERT.key(&self.config.stream);
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
                .arg(&self.config.stream)
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
                .arg(&self.config.stream)
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
        let mut conn = self.conn(op).await?;
        let settled: i64 = SETTLE
            .key(&self.config.stream)
            .arg(&self.config.group)
            .arg(&self.config.consumer)
            .arg(first)
            .arg(last)
            .arg(ids)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.err(op, &e))?;
        Ok(settled.max(0) as u64)
    }

    pub(super) async fn ack_and_delete(&self, ids: Vec<String>, op: &str) -> Result<()> {
        let mut conn = self.conn(op).await?;
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("XACK")
            .arg(&self.config.stream)
            .arg(&self.config.group)
            .arg(&ids)
            .ignore()
            .cmd("XDEL")
            .arg(&self.config.stream)
            .arg(&ids)
            .ignore();
        pipe.query_async::<()>(&mut conn)
            .await
            .map_err(|e| self.err(op, &e))
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
    use super::super::send_batch::tests::{message, names};
    use super::super::send_batch::SendBatch;
    use super::{id_range, InsertFailure};
    use crate::support::error::Error;

    fn dropped() -> InsertFailure {
        InsertFailure {
            dropped: true,
            ..InsertFailure::from(Error::connection("reset"))
        }
    }

    #[test]
    fn a_batch_found_dropped_is_sent_again_once_when_its_first_copy_would_be_found() {
        let single_node = SendBatch::new(&names("", "messenger:s", false), &[message(0.0)]);
        assert!(dropped().may_send_again(&single_node, false));
        assert!(!dropped().may_send_again(&single_node, true));
        let timed_out: InsertFailure = Error::connection("timeout").into();
        assert!(!timed_out.may_send_again(&single_node, false));
    }

    #[test]
    fn a_cluster_batch_with_due_messages_is_not_sent_again() {
        let due = [message(0.0), message(500.0)];
        let cluster = SendBatch::new(&names("", "messenger:{s}", true), &due);
        assert!(!dropped().may_send_again(&cluster, false));
        // Delayed members carry their own nonce: a repeat adds each once.
        let delayed = SendBatch::new(&names("", "messenger:{s}", true), &[message(500.0)]);
        assert!(dropped().may_send_again(&delayed, false));
    }

    #[test]
    fn id_ranges_compare_stream_ids_as_numbers() {
        let ids: Vec<String> = ["10-2", "9-5", "10-10", "10-1"].map(String::from).to_vec();
        assert_eq!(id_range(&ids), Some(("9-5", "10-10")));
        assert_eq!(id_range(&[]), None);
    }
}
