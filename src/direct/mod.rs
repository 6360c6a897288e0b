//! Sends served on the host's own event loop (for an engine whose `Engine::direct_wire` gives
//! one, a single Redis node), and every call into the host process that the compiler cannot
//! check: libuv's poll and timer handles, JavaScript functions called from their callbacks, a
//! pointer owned by the JavaScript thread, and the process's descriptor table. The rest of the
//! crate calls the safe functions here. Imports `queue` and `support`.

pub mod loop_callback;
pub mod owned_by_thread;
mod send_handover;
mod send_lane;
mod send_links;
mod send_state;
pub mod sends;
pub mod settle_report;
pub mod uv;
