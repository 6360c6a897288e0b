//! Where the direct path's settled sends go: through the queue's threadsafe callback from
//! any thread, or straight into JavaScript from the loop's own callbacks; and how a send
//! the direct path does not take reaches the runtime's path.

use crate::queue::completions::Settled;
use crate::queue::engine::NewMessage;
use crate::support::error::Result;
use std::rc::Rc;
use std::sync::Arc;

/// Where settled sends are reported, from any thread: the queue's threadsafe callback, which
/// queues the call. Used for settles made during a napi call (JavaScript is waiting on that
/// call, and on `sendQueued` it has not registered the send's promise yet) and from the
/// runtime.
pub type Report = Arc<dyn Fn(Vec<Settled<String>>) + Send + Sync>;

/// Reports settles from the loop's own callbacks straight into JavaScript (see
/// `loop_callback`), with none of the state borrowed; hands the batch back if JavaScript
/// could not be called, for `Report` to take.
pub type LoopReport = Rc<dyn Fn(Vec<Settled<String>>) -> Option<Vec<Settled<String>>>>;

/// Queues a send on the runtime's path, in call order with every other send there.
pub type ToRuntime = Arc<dyn Fn(u32, NewMessage) -> Result<()> + Send + Sync>;

/// Settles of one queue taken from the state, with where they go.
pub(super) type Ready = (Vec<Settled<String>>, Report, Option<LoopReport>);

/// Reports settles from a loop callback: into JavaScript at once, else through `Report`.
/// The state may be gone once JavaScript has run: nothing here touches it.
pub(super) fn deliver((batch, report, here): Ready) {
    let batch = match here {
        Some(here) => here(batch),
        None => Some(batch),
    };
    if let Some(batch) = batch {
        report(batch);
    }
}
