//! How settled sends reach JavaScript: in batches, through one threadsafe function per queue
//! (or, on the direct path, one call from the event loop's own callbacks). A batch is as few
//! JavaScript values as it can be, each element handed over being a Node-API call on the event
//! loop: a sequence number per send, one string of ids, and errors only when a send failed.

use crate::queue::completions::Settled;
use napi::bindgen_prelude::FnArgs;

/// Sends that settled together, handed to the callback as its three arguments (an argument
/// list costs JavaScript no object to build and no property to look up): the sequence
/// numbers JavaScript gave them; their ids, in the same order, joined by line breaks (`''`
/// for a send that failed); and, only when a send failed, the error (coded as every native
/// error is) each failed with, or null.
pub(super) type SettledSends = FnArgs<(Vec<u32>, String, Option<Vec<Option<String>>>)>;

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

pub(super) fn settled_sends(batch: Vec<Settled<String>>) -> SettledSends {
    let failed = batch.iter().any(|(_, result)| result.is_err());
    let mut seqs = Vec::with_capacity(batch.len());
    let mut ids = String::with_capacity(batch.len() * 20);
    let mut errors = failed.then(|| Vec::with_capacity(batch.len()));
    for (i, (seq, result)) in batch.into_iter().enumerate() {
        seqs.push(seq);
        if i > 0 {
            ids.push(ID_SEPARATOR);
        }
        let error = match result {
            Ok(id) => {
                ids.push_str(&id);
                None
            }
            Err(err) => Some(err.boundary_message()),
        };
        if let Some(errors) = errors.as_mut() {
            errors.push(error);
        }
    }
    FnArgs::from((seqs, ids, errors))
}
