//! This thread's links (one shared send connection per environment and node, see
//! `send_state::Link`): found or opened for a queue's lane, freed when their last lane leaves,
//! ended at the environment's teardown; and the libuv callbacks that drive them.

use super::send_state::Link;
use super::settle_report::deliver;
use crate::direct::uv;
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;

thread_local! {
    /// This thread's links by (environment, connection key): the queues of one environment
    /// that send to the same node share one connection.
    static LINKS: RefCell<HashMap<(usize, u64), usize>> = RefCell::new(HashMap::new());
}

/// This thread's link for `key`, opened if there is none.
pub(super) fn find_or_open(
    env: &napi::Env,
    env_loop: uv::LoopPtr,
    key: (usize, u64),
) -> Option<*mut Link> {
    match LINKS.with(|links| links.borrow().get(&key).copied()) {
        Some(link) => Some(link as *mut Link),
        None => open_link(env, env_loop, key),
    }
}

/// Runs a libuv callback's body so that a panic in it ends there: unwinding into libuv would
/// abort the app's process. What the callback was doing is lost; the link's timer and the
/// sends' bound fail the batches it held, as for a connection that went silent.
fn guarded(body: impl FnOnce()) {
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
}

unsafe extern "C" fn on_poll(
    handle: *mut c_void,
    status: std::ffi::c_int,
    events: std::ffi::c_int,
) {
    // SAFETY: as the callback's own contract (below).
    guarded(|| unsafe { poll_ready(handle, status, events) });
}

/// # Safety
/// `handle` is a poll handle of a link, made by `uv`; called on the link's thread by libuv.
unsafe fn poll_ready(handle: *mut c_void, status: std::ffi::c_int, events: std::ffi::c_int) {
    // SAFETY: the handle is a poll handle of a link, made by `uv`.
    let link = unsafe { uv::data_of(handle) } as *mut Link;
    let ready = {
        // SAFETY: the handle's data is the Link that owns it, alive while the handle is
        // open; on its JavaScript thread, outside any napi call (see DirectSends). The
        // borrow ends before JavaScript is called.
        let state = unsafe { &mut *link };
        if status < 0 {
            state.fail();
        } else {
            if events & uv::WRITABLE != 0 {
                state.flush_unsent();
            }
            if events & uv::READABLE != 0 {
                state.read_replies();
            }
        }
        state.take_ready()
    };
    // SAFETY: no borrow of the link is alive; on its thread, outside any napi call.
    unsafe { free_if_unused(link) };
    ready.into_iter().for_each(deliver);
}

unsafe extern "C" fn on_timer(handle: *mut c_void) {
    // SAFETY: as the callback's own contract (below).
    guarded(|| unsafe { timer_fired(handle) });
}

/// # Safety
/// `handle` is the timer of a link, made by `uv`; called on the link's thread by libuv.
unsafe fn timer_fired(handle: *mut c_void) {
    // SAFETY: the handle is the timer of a link, made by `uv`.
    let link = unsafe { uv::data_of(handle) } as *mut Link;
    let ready = {
        // SAFETY: as in on_poll.
        let state = unsafe { &mut *link };
        state.time_out();
        state.take_ready()
    };
    // SAFETY: as in on_poll.
    unsafe { free_if_unused(link) };
    ready.into_iter().for_each(deliver);
}

/// Opens and registers this thread's link for `key`: the state, its env cleanup hook and
/// its timer.
fn open_link(env: &napi::Env, env_loop: uv::LoopPtr, key: (usize, u64)) -> Option<*mut Link> {
    let link = Box::into_raw(Box::new(Link::new(
        key,
        env_loop,
        env.raw(),
        (on_poll, on_timer),
    )));
    // SAFETY: `link` is alive until `free_if_unused` removes the hook and closes the
    // handles; not shared yet. On the environment's thread, inside a napi call.
    unsafe {
        (*link).handle_data = link as *mut c_void;
        let hooked = napi::sys::napi_add_env_cleanup_hook(
            env.raw(),
            Some(on_env_teardown),
            link as *mut c_void,
        );
        if hooked != napi::sys::Status::napi_ok {
            drop(Box::from_raw(link));
            return None;
        }
        (*link).timer = uv::Timer::new(env_loop, link as *mut c_void);
    }
    LINKS.with(|links| links.borrow_mut().insert(key, link as usize));
    Some(link)
}

/// Frees a link that no lane uses any more: out of the registry, its hook removed, its
/// handles closed.
///
/// # Safety
/// `link` from `open_link`, not freed yet; on its thread, with no borrow of it alive.
pub(super) unsafe fn free_if_unused(link: *mut Link) {
    // SAFETY: as the caller promises.
    let (unused, env, key) = unsafe { ((*link).lanes.is_empty(), (*link).env, (*link).key) };
    if !unused {
        return;
    }
    unregister(key, link);
    // SAFETY: the hook is removed (a no-op once it has run) and the handles closed, so
    // nothing can reach the state any more; it came from Box::into_raw in `open_link`.
    unsafe {
        napi::sys::napi_remove_env_cleanup_hook(env, Some(on_env_teardown), link as *mut c_void);
        let mut state = Box::from_raw(link);
        state.close_handles();
    }
}

/// The environment is being torn down: napi-rs may shut the async runtime down in a cleanup
/// hook of its own (when no other thread holds the addon), and the loop turns that run
/// during teardown could still call back into the link, so everything ends here, with
/// nothing handed to the runtime.
unsafe extern "C" fn on_env_teardown(data: *mut c_void) {
    // SAFETY: as the hook's own contract (below).
    guarded(|| unsafe { end_link(data) });
}

/// # Safety
/// `data` is a link registered by `open_link`; called on its environment's thread.
unsafe fn end_link(data: *mut c_void) {
    let link = data as *mut Link;
    // SAFETY: the hook's data is the link, alive until `free_if_unused` removes the hook; on
    // the environment's thread, outside any napi call.
    let key = unsafe {
        (*link).end_here();
        (*link).key
    };
    // No new lane joins a link whose environment is gone.
    unregister(key, link);
}

/// Takes `link` out of this thread's registry (if it is still the one under `key`).
fn unregister(key: (usize, u64), link: *mut Link) {
    let _ = LINKS.try_with(|links| {
        let mut links = links.borrow_mut();
        if links.get(&key) == Some(&(link as usize)) {
            links.remove(&key);
        }
    });
}
