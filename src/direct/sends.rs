//! Sends served on the JavaScript thread: one connection per node, shared by every queue of
//! the thread, whose socket the JavaScript thread's event loop watches (libuv, see `uv`), so a sequential send is written
//! by the call that makes it and its reply read where its promise resolves, with no hand-off
//! to the I/O thread and back (two thread wake-ups per send, which a sequential send would
//! otherwise pay every time).
//!
//! Only the path of the common case: due messages, the connection up, no send of the queue on
//! the runtime's path in flight (so neither path overtakes the other). Sends made while a
//! batch is in flight wait and go together as the next batch (group commit); a second batch
//! is written before the first one's reply once enough have piled up, so the server stores
//! one while JavaScript makes the next (the replies come back in order on the one
//! connection). Anything else goes to the runtime's path, and so does every doubt: a batch
//! whose connection failed is sent again there as the same batch (the wire makes repeats
//! store nothing twice), a batch that got no reply within the send bound fails with the
//! outcome unknown, never sent again.

use super::send_lane::{Lane, LaneId};
use super::send_links;
use super::send_state::Link;
use super::settle_report::{LoopReport, Report, ToRuntime};
use crate::direct::owned_by_thread::OwnedByThread;
use crate::direct::uv;
use crate::queue::engine::NewMessage;
use crate::queue::Queue;
use crate::support::error::Result;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// The variable that turns the direct path off (`0` or `false`): every send then takes the
/// runtime's path, as before it existed.
pub const DISABLE_VAR: &str = "NESTJS_MESSENGER_NATIVE_DIRECT_SENDS";

fn enabled(value: Option<String>) -> bool {
    !matches!(
        value.as_deref().map(str::trim),
        Some("0" | "false" | "off" | "no")
    )
}

/// One queue's direct path: a lane of its thread's link to the queue's node. Lives on the
/// JavaScript thread that made it: its loop's callbacks run there, and a call from any other
/// thread touches nothing (a send takes the runtime's path). Settles are gathered while the
/// link is borrowed and reported after the borrow ends (the loop's callbacks call
/// JavaScript, which may send or close, re-entering the link), so at most one borrow of it
/// is ever alive.
pub struct DirectSends {
    link: OwnedByThread<Link>,
    lane: LaneId,
}

impl DirectSends {
    /// The direct path of `queue`, if its engine has one and the host has libuv.
    pub fn new(
        env: &napi::Env,
        queue: Arc<Queue>,
        report: Report,
        report_here: Option<LoopReport>,
        to_runtime: ToRuntime,
        on_runtime_path: Arc<AtomicUsize>,
    ) -> Option<Self> {
        let env_loop = env.get_uv_event_loop().ok()?;
        if !uv::available() || env_loop.is_null() || !enabled(std::env::var(DISABLE_VAR).ok()) {
            return None;
        }
        let wire = queue.engine().clone().direct_wire()?;
        let key = (env.raw() as usize, wire.link_key());
        let link = send_links::find_or_open(env, env_loop, key)?;
        // SAFETY: a registered link is alive (it leaves the registry before it is freed);
        // on its thread, inside a napi call, with no other borrow of it alive.
        let state = unsafe { &mut *link };
        let lane = state.next_lane;
        state.next_lane += 1;
        let reports = (report, report_here);
        let new_lane = Lane::new(wire, queue, reports, to_runtime, on_runtime_path);
        state.lanes.insert(lane, new_lane);
        Some(Self {
            link: OwnedByThread::new(link),
            lane,
        })
    }

    /// The link, on the thread that owns it only.
    #[allow(clippy::mut_from_ref)] // one thread, one borrow at a time: see the struct
    fn link(&self) -> Option<&mut Link> {
        // SAFETY: as the struct says; alive while this lane is in it, and reached on its
        // owner thread only.
        self.link.get().map(|link| unsafe { &mut *link })
    }

    /// Takes send `seq` if the direct path can serve it now (the message is handed back
    /// otherwise); an error for a send `Queue::send` would refuse at once.
    pub fn try_send(&self, seq: u32, message: NewMessage) -> Result<Option<NewMessage>> {
        let Some(link) = self.link() else {
            return Ok(Some(message));
        };
        let taken = link.try_send(self.lane, seq, message);
        link.report_queued();
        taken
    }

    /// No more direct sends from this queue. Its batches in flight still settle on the
    /// connection; the sends waiting behind them, and every later one, take the runtime's
    /// path and wait there for them (a hold), so that none overtakes them.
    pub fn shut(&self) {
        let Some(link) = self.link() else { return };
        if let Some(lane) = link.lanes.get_mut(&self.lane) {
            lane.shut();
        }
        link.touch(self.lane);
        link.report_queued();
    }
}

impl Drop for DirectSends {
    /// Usually right after `shut`; without it only when the JavaScript environment is torn
    /// down (the queue's settle callback keeps the queue alive until then).
    fn drop(&mut self) {
        let Some(pointer) = self.link.get() else {
            // Another thread's loop may still call back into the link: it is left alive
            // (leaked) rather than freed under it.
            return;
        };
        {
            // SAFETY: on its owner thread, with no other borrow alive; the link is alive
            // while this lane is in it.
            let link = unsafe { &mut *pointer };
            if let Some(lane) = link.lanes.get_mut(&self.lane) {
                lane.shut();
                lane.detached = true;
            }
            link.touch(self.lane);
            link.report_queued();
        }
        // SAFETY: no borrow of the link is alive; on its thread.
        unsafe { send_links::free_if_unused(pointer) };
    }
}

#[cfg(test)]
mod tests {
    use super::enabled;

    #[test]
    fn only_an_explicit_no_turns_the_direct_path_off() {
        for on in [None, Some(""), Some("1"), Some("yes"), Some("maybe")] {
            assert!(enabled(on.map(str::to_owned)), "{on:?}");
        }
        for off in ["0", "false", "off", "no", " 0 "] {
            assert!(!enabled(Some(off.to_owned())), "{off}");
        }
    }
}
