//! The few libuv calls that let a socket be served on the JavaScript thread's own event loop
//! (see `direct_sends`): a poll handle on a file descriptor and a timer. The functions are
//! looked up in the host process when first needed; a host that does not export them (a
//! runtime other than Node.js) simply has no direct path.

#[cfg(unix)]
use std::ffi::CStr;
use std::ffi::{c_int, c_void};
#[cfg(unix)]
use std::sync::OnceLock;

pub type LoopPtr = *mut napi::sys::uv_loop_s;

/// libuv's `uv_handle_type` values (stable across libuv 1.x).
const UV_POLL: c_int = 8;
const UV_TIMER: c_int = 13;
pub const READABLE: c_int = 1;
pub const WRITABLE: c_int = 2;

pub type PollCb = unsafe extern "C" fn(handle: *mut c_void, status: c_int, events: c_int);
pub type TimerCb = unsafe extern "C" fn(handle: *mut c_void);
type CloseCb = unsafe extern "C" fn(handle: *mut c_void);

type HandleSize = unsafe extern "C" fn(c_int) -> usize;
type PollInitSocket = unsafe extern "C" fn(LoopPtr, *mut c_void, c_int) -> c_int;
type PollStart = unsafe extern "C" fn(*mut c_void, c_int, PollCb) -> c_int;
type HandleOp = unsafe extern "C" fn(*mut c_void) -> c_int;
type TimerInit = unsafe extern "C" fn(LoopPtr, *mut c_void) -> c_int;
type TimerStart = unsafe extern "C" fn(*mut c_void, TimerCb, u64, u64) -> c_int;
type Close = unsafe extern "C" fn(*mut c_void, CloseCb);
type Unref = unsafe extern "C" fn(*mut c_void);

struct Api {
    handle_size: HandleSize,
    poll_init_socket: PollInitSocket,
    poll_start: PollStart,
    poll_stop: HandleOp,
    timer_init: TimerInit,
    timer_start: TimerStart,
    timer_stop: HandleOp,
    close: Close,
    unref: Unref,
}

#[cfg(not(unix))]
fn api() -> Option<&'static Api> {
    None
}

#[cfg(unix)]
fn api() -> Option<&'static Api> {
    static API: OnceLock<Option<Api>> = OnceLock::new();
    API.get_or_init(|| {
        fn find(name: &CStr) -> Option<*mut c_void> {
            // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads.
            let found = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            (!found.is_null()).then_some(found)
        }
        // SAFETY: (every transmute) the symbol is libuv's own function of that name, whose C
        // signature is the type it is cast to (libuv 1.x's public API).
        unsafe {
            Some(Api {
                handle_size: std::mem::transmute::<*mut c_void, HandleSize>(find(
                    c"uv_handle_size",
                )?),
                poll_init_socket: std::mem::transmute::<*mut c_void, PollInitSocket>(find(
                    c"uv_poll_init_socket",
                )?),
                poll_start: std::mem::transmute::<*mut c_void, PollStart>(find(c"uv_poll_start")?),
                poll_stop: std::mem::transmute::<*mut c_void, HandleOp>(find(c"uv_poll_stop")?),
                timer_init: std::mem::transmute::<*mut c_void, TimerInit>(find(c"uv_timer_init")?),
                timer_start: std::mem::transmute::<*mut c_void, TimerStart>(find(
                    c"uv_timer_start",
                )?),
                timer_stop: std::mem::transmute::<*mut c_void, HandleOp>(find(c"uv_timer_stop")?),
                close: std::mem::transmute::<*mut c_void, Close>(find(c"uv_close")?),
                unref: std::mem::transmute::<*mut c_void, Unref>(find(c"uv_unref")?),
            })
        }
    })
    .as_ref()
}

/// Whether this process's host exports libuv.
pub fn available() -> bool {
    api().is_some()
}

/// A libuv handle's memory: `uv_handle_size` bytes, the first field (`data`) ours. Freed by
/// the close callback, never before libuv is done with it.
struct Raw(*mut c_void);

impl Raw {
    fn new(kind: c_int, data: *mut c_void) -> Option<Self> {
        let api = api()?;
        // SAFETY: uv_handle_size only reads its argument.
        let size = unsafe { (api.handle_size)(kind) };
        let words = size.div_ceil(std::mem::size_of::<u64>()).max(1);
        let memory = Box::into_raw(vec![0u64; words].into_boxed_slice()) as *mut c_void;
        // SAFETY: the memory is at least one pointer wide and aligned for one.
        unsafe { *(memory as *mut *mut c_void) = data };
        Some(Self(memory))
    }

    /// Closes the handle; its memory is freed once libuv calls back.
    fn close(self, kind: c_int) {
        unsafe extern "C" fn free_poll(handle: *mut c_void) {
            // SAFETY: the pointer came from `Box::into_raw` in `Raw::new` with this size.
            unsafe { free_words(handle, UV_POLL) }
        }
        unsafe extern "C" fn free_timer(handle: *mut c_void) {
            // SAFETY: as above.
            unsafe { free_words(handle, UV_TIMER) }
        }
        let Some(api) = api() else { return };
        let callback: CloseCb = if kind == UV_POLL {
            free_poll
        } else {
            free_timer
        };
        // SAFETY: the handle was initialised and is closed once (self is consumed).
        unsafe { (api.close)(self.0, callback) };
    }
}

unsafe fn free_words(handle: *mut c_void, kind: c_int) {
    let Some(api) = api() else { return };
    // SAFETY: as in Raw::new; the same size rebuilds the same boxed slice.
    unsafe {
        let words = (api.handle_size)(kind)
            .div_ceil(std::mem::size_of::<u64>())
            .max(1);
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            handle as *mut u64,
            words,
        )));
    }
}

/// The `data` pointer a callback's handle carries.
///
/// # Safety
/// `handle` must be a handle made by this module.
pub unsafe fn data_of(handle: *mut c_void) -> *mut c_void {
    // SAFETY: `data` is the handle's first field (set in Raw::new).
    unsafe { *(handle as *mut *mut c_void) }
}

/// The descriptor libuv polls for `socket` (unix only: elsewhere there is no direct path).
#[cfg(unix)]
pub fn socket_of(socket: &std::net::TcpStream) -> Option<c_int> {
    use std::os::fd::AsRawFd;
    Some(socket.as_raw_fd())
}

#[cfg(not(unix))]
pub fn socket_of(_socket: &std::net::TcpStream) -> Option<c_int> {
    None
}

/// Readiness of one socket on the loop; never keeps the loop alive by itself.
pub struct Poll(Option<Raw>);

impl Poll {
    /// # Safety
    /// Call on the loop's thread; `data` must stay valid until `close`.
    pub unsafe fn new(event_loop: LoopPtr, fd: c_int, data: *mut c_void) -> Option<Self> {
        let api = api()?;
        let raw = Raw::new(UV_POLL, data)?;
        // SAFETY: fresh handle memory of the right size, on the loop's thread.
        if unsafe { (api.poll_init_socket)(event_loop, raw.0, fd) } != 0 {
            // SAFETY: not initialised, so libuv never saw it: it is freed here, once.
            unsafe { free_words(raw.0, UV_POLL) };
            return None;
        }
        // SAFETY: initialised just above, on the loop's thread.
        unsafe { (api.unref)(raw.0) };
        Some(Self(Some(raw)))
    }

    /// Watches for `events` (READABLE | WRITABLE), replacing the previous set.
    pub fn start(&self, events: c_int, callback: PollCb) -> bool {
        match (&self.0, api()) {
            // SAFETY: an initialised, open handle.
            (Some(raw), Some(api)) => unsafe { (api.poll_start)(raw.0, events, callback) == 0 },
            _ => false,
        }
    }

    pub fn close(&mut self) {
        if let (Some(raw), Some(api)) = (self.0.take(), api()) {
            // SAFETY: an initialised, open handle.
            unsafe { (api.poll_stop)(raw.0) };
            raw.close(UV_POLL);
        }
    }
}

impl Drop for Poll {
    fn drop(&mut self) {
        self.close();
    }
}

/// A one-shot timer on the loop; never keeps the loop alive by itself.
pub struct Timer(Option<Raw>);

impl Timer {
    /// # Safety
    /// Call on the loop's thread; `data` must stay valid until `close`.
    pub unsafe fn new(event_loop: LoopPtr, data: *mut c_void) -> Option<Self> {
        let api = api()?;
        let raw = Raw::new(UV_TIMER, data)?;
        // SAFETY: fresh handle memory of the right size, on the loop's thread.
        if unsafe { (api.timer_init)(event_loop, raw.0) } != 0 {
            // SAFETY: not initialised, so libuv never saw it: it is freed here, once.
            unsafe { free_words(raw.0, UV_TIMER) };
            return None;
        }
        // SAFETY: initialised just above, on the loop's thread.
        unsafe { (api.unref)(raw.0) };
        Some(Self(Some(raw)))
    }

    pub fn start(&self, after_ms: u64, callback: TimerCb) {
        if let (Some(raw), Some(api)) = (&self.0, api()) {
            // SAFETY: an initialised, open handle.
            unsafe { (api.timer_start)(raw.0, callback, after_ms, 0) };
        }
    }

    pub fn stop(&self) {
        if let (Some(raw), Some(api)) = (&self.0, api()) {
            // SAFETY: an initialised, open handle.
            unsafe { (api.timer_stop)(raw.0) };
        }
    }

    pub fn close(&mut self) {
        self.stop();
        if let Some(raw) = self.0.take() {
            raw.close(UV_TIMER);
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.close();
    }
}
