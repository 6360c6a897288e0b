//! The JavaScript surface, and nothing else: the exported `NativeQueue` class and functions,
//! the conversion of their arguments, results and errors, a send's text read in one pass and a
//! claimed message handed over as one array, and the runtime napi-rs runs our futures on. It
//! holds no queue logic: a call goes down to `queue` (sends through `direct` when the host's
//! event loop can serve them), `engines` (to open one) or `support`. It may import every
//! layer; nothing imports it. (Inside it, `napi::` still names the napi crate: a module's
//! own name is not in scope in its children.)

pub mod message;
pub mod runtime;
pub mod text;

// The exports are left out of `cargo test`: the test executable has no Node to provide the
// napi_* symbols they reference. Everything they call is tested in its own module.
#[cfg(not(test))]
mod functions;
#[cfg(not(test))]
mod loop_hold;
#[cfg(not(test))]
mod native_queue;
#[cfg(not(test))]
mod options;
#[cfg(not(test))]
mod settled_sends;
#[cfg(not(test))]
mod values;

#[cfg(not(test))]
/// Hands napi-rs our runtime before its first async call; should it fail to build, napi-rs
/// builds its default one.
#[napi_derive::module_init]
fn init() {
    if let Ok(built) = runtime::build() {
        napi::bindgen_prelude::create_custom_tokio_runtime(built);
    }
}
