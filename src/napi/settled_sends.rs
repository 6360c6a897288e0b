//! How settled sends reach JavaScript: in batches, as parallel arrays of sequence numbers, ids
//! and errors, through one threadsafe function per queue (or, on the direct path, one call
//! from the event loop's own callbacks).

use crate::direct::settle_report::ToRuntime;
use crate::queue::completions::Settled;
use std::sync::Arc;

/// Sends that settled together, by the sequence numbers JavaScript gave them: for each,
/// its id, or the error (coded as every native error is) it failed with.
#[napi(object)]
pub struct SettledSends {
    pub seqs: Vec<u32>,
    pub ids: Vec<Option<String>>,
    pub errors: Vec<Option<String>>,
}

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
    let mut settled = SettledSends {
        seqs: Vec::with_capacity(batch.len()),
        ids: Vec::with_capacity(batch.len()),
        errors: Vec::with_capacity(batch.len()),
    };
    for (seq, result) in batch {
        settled.seqs.push(seq);
        match result {
            Ok(id) => {
                settled.ids.push(Some(id));
                settled.errors.push(None);
            }
            Err(err) => {
                settled.ids.push(None);
                settled.errors.push(Some(err.boundary_message()));
            }
        }
    }
    settled
}
