//! Sends served on the JavaScript thread: a connection of their own whose socket the
//! JavaScript thread's event loop watches (libuv, see `uv`), so a sequential send is written
//! by the call that makes it and its reply read where its promise resolves, with no hand-off
//! to the I/O thread and back (two thread wake-ups per send, the cost that made a sequential
//! Redis send slower than upstream's).
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

use super::send_state::Inner;
use super::settle_report::{LoopReport, Report, ToRuntime};
use crate::direct::owned_by_thread::OwnedByThread;
use crate::direct::uv;
use crate::queue::engine::NewMessage;
use crate::queue::Queue;
use crate::support::error::Result;
use std::ffi::c_void;
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

/// One queue's direct path. Lives on the JavaScript thread that made it: its loop's
/// callbacks run there, and a call from any other thread touches nothing (a send takes the
/// runtime's path). Settles are gathered while the state is borrowed and reported after the
/// borrow ends (the loop's callbacks call JavaScript, which may send or close, re-entering
/// the state), so at most one borrow of it is ever alive.
pub struct DirectSends {
    inner: OwnedByThread<Inner>,
}

impl DirectSends {
    /// The direct path of `queue`, if its engine has one and the host has libuv.
    pub fn new(
        env: &napi::Env,
        queue: Arc<Queue>,
        report: Report,
        report_here: Option<LoopReport>,
        to_runtime: ToRuntime,
        elsewhere: Arc<AtomicUsize>,
    ) -> Option<Self> {
        let env_loop = env.get_uv_event_loop().ok()?;
        if !uv::available() || env_loop.is_null() || !enabled(std::env::var(DISABLE_VAR).ok()) {
            return None;
        }
        let wire = queue.engine().clone().direct_wire()?;
        let inner = Box::into_raw(Box::new(Inner::new(
            wire,
            queue,
            (report, report_here),
            to_runtime,
            elsewhere,
            env_loop,
            env.raw(),
        )));
        // SAFETY: `inner` is alive until Drop, which removes the hook and closes the timer
        // first; not shared yet. On the environment's thread, inside a napi call.
        unsafe {
            (*inner).handle_data = inner as *mut c_void;
            let hooked = napi::sys::napi_add_env_cleanup_hook(
                env.raw(),
                Some(on_env_teardown),
                inner as *mut c_void,
            );
            if hooked != napi::sys::Status::napi_ok {
                drop(Box::from_raw(inner));
                return None;
            }
            (*inner).timer = uv::Timer::new(env_loop, inner as *mut c_void);
        }
        Some(Self {
            inner: OwnedByThread::new(inner),
        })
    }

    /// The state, on the thread that owns it only.
    #[allow(clippy::mut_from_ref)] // one thread, one borrow at a time: see the struct
    fn inner(&self) -> Option<&mut Inner> {
        // SAFETY: as the struct says; alive until Drop, and reached on its owner thread only.
        self.inner.get().map(|inner| unsafe { &mut *inner })
    }

    /// Takes send `seq` if the direct path can serve it now (the message is handed back
    /// otherwise); an error for a send `Queue::send` would refuse at once.
    pub fn try_send(&self, seq: u32, message: NewMessage) -> Result<Option<NewMessage>> {
        let Some(inner) = self.inner() else {
            return Ok(Some(message));
        };
        let taken = inner.try_send(seq, message);
        inner.report_queued();
        taken
    }

    /// No more direct sends: batches in flight are handed to the runtime (as the same batch),
    /// the connection closed. Only while the environment lives: the runtime may be gone
    /// once it is torn down (see `on_env_teardown`).
    pub fn shut(&self) {
        let Some(inner) = self.inner() else { return };
        inner.closed = true;
        inner.fail();
        inner.report_queued();
    }
}

impl Drop for DirectSends {
    /// Reached without `shut` only when the JavaScript environment is torn down (the queue's
    /// settle callback keeps the queue alive until then), after `on_env_teardown`.
    fn drop(&mut self) {
        let Some(pointer) = self.inner.get() else {
            // Another thread's loop may still call back into the state: it is left alive
            // (leaked) rather than freed under it.
            return;
        };
        // SAFETY: from Box::into_raw in `new`, on its owner thread. The hook is removed (a
        // no-op once it has run) and `end_here` closes both handles, so nothing can reach
        // the state any more.
        unsafe {
            napi::sys::napi_remove_env_cleanup_hook(
                (*pointer).env,
                Some(on_env_teardown),
                pointer as *mut c_void,
            );
            Box::from_raw(pointer).end_here();
        }
    }
}

/// The environment is being torn down: napi-rs may shut the async runtime down in a cleanup
/// hook of its own (when no other thread holds the addon), and the loop turns that run
/// during teardown could still call back into the state, so everything ends here, with
/// nothing handed to the runtime.
unsafe extern "C" fn on_env_teardown(data: *mut c_void) {
    // SAFETY: the hook's data is the state, alive until Drop removes the hook; on the
    // environment's thread, outside any napi call.
    unsafe { (*(data as *mut Inner)).end_here() };
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
