//! Native message transports for `@schally/nestjs-messenger`. The layers, top-down (each may
//! import only the ones below it; `npm run check:cycles` fails on a cycle between files or
//! between layers):
//!
//! - `napi`: the JavaScript surface: the exported class and functions, and conversion;
//! - `diagnostics`: the `doctor` and `stats` commands;
//! - `engines`: the storages (`sql` with one folder per dialect, `redis`), each implementing
//!   the contract;
//! - `direct`: sends served on the host's event loop, and every call into the host process
//!   that Rust cannot check (libuv handles, callbacks into JavaScript, descriptors);
//! - `queue`: the engine-independent queue (claims, prefetch, settles, group commit), with
//!   the contract every engine implements (`queue::engine`) at its bottom;
//! - `support`: what every layer uses: errors, DSNs, identifiers, backoff, durations, shared
//!   per-DSN targets, TCP keepalive.
//!
//! `unsafe` code lives only in `napi` and `direct`.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg_attr(not(test), macro_use)]
extern crate napi_derive;

pub mod diagnostics;
pub mod direct;
pub mod engines;
pub mod napi;
pub mod queue;
pub mod support;
