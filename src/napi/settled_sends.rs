//! How settled sends reach JavaScript: in batches, through one threadsafe function per queue
//! (or, on the direct path, one call from the event loop's own callbacks). A batch is as few
//! JavaScript values as it can be, each element handed over being a Node-API call on the event
//! loop: a sequence number per send, one string of ids, and errors only when a send failed.

use crate::direct::settle_report::ToRuntime;
use crate::queue::completions::Settled;
use std::sync::Arc;

/// Sends that settled together, by the sequence numbers JavaScript gave them.
#[napi(object)]
pub struct SettledSends {
    pub seqs: Vec<u32>,
    /// The ids, in the order of `seqs`, joined by line breaks (`''` for a send that failed).
    pub ids: String,
    /// Absent when every send was stored; else, in the order of `seqs`, the error (coded as every
    /// native error is) each failed with, or null.
    pub errors: Option<Vec<Option<String>>>,
}

/// No id has a line break: a SQL id is an integer, a Redis id is `<ms>-<seq>`.
const ID_SEPARATOR: char = '\n';

pub(super) type SettledTsfn = napi::threadsafe_function::ThreadsafeFunction<
    Vec<Settled<String>>,
    (),
    SettledSends,
    napi::Status,
    false,
    true,
>;

pub(super) struct SendReporter {
    /// Queues a send on the runtime's path (group commit, settled through `completions`).
    pub(super) to_runtime: ToRuntime,
    /// Weak (it keeps no event loop alive) except while JavaScript waits on a send.
    pub(super) tsfn: Arc<std::sync::Mutex<SettledTsfn>>,
}

pub(super) fn settled_sends(batch: Vec<Settled<String>>) -> SettledSends {
    let failed = batch.iter().any(|(_, result)| result.is_err());
    let mut settled = SettledSends {
        seqs: Vec::with_capacity(batch.len()),
        ids: String::with_capacity(batch.len() * 20),
        errors: failed.then(|| Vec::with_capacity(batch.len())),
    };
    for (i, (seq, result)) in batch.into_iter().enumerate() {
        settled.seqs.push(seq);
        if i > 0 {
            settled.ids.push(ID_SEPARATOR);
        }
        let error = match result {
            Ok(id) => {
                settled.ids.push_str(&id);
                None
            }
            Err(err) => Some(err.boundary_message()),
        };
        if let Some(errors) = settled.errors.as_mut() {
            errors.push(error);
        }
    }
    settled
}
