//! Message text from JavaScript in one pass. napi-rs's `String` asks V8 for the UTF-8 length
//! (a scan of the whole string), zero-fills a buffer of that size, then encodes (a second
//! scan): for a 100 KB body that is most of what a send costs the JavaScript thread outside the
//! serializer. Here the length in UTF-16 units (no scan) bounds the UTF-8 size, so V8 encodes
//! once into an unfilled buffer, on its path for a buffer known to be large enough.

use napi::bindgen_prelude::{FromNapiValue, TypeName, ValueType};
use napi::{sys, Error, Status};
use std::ptr;

/// A JavaScript string as Rust UTF-8 text (lone surrogates become U+FFFD, as with `String`).
pub struct JsText(pub String);

/// UTF-8 takes at most 3 bytes per UTF-16 unit (a surrogate pair: 4 bytes for 2 units).
const MAX_UTF8_PER_UNIT: usize = 3;

impl FromNapiValue for JsText {
    unsafe fn from_napi_value(env: sys::napi_env, value: sys::napi_value) -> napi::Result<Self> {
        let mut units = 0usize;
        // SAFETY: with a null buffer Node-API only reports the length (V8's String::Length,
        // which reads a field); a non-string is refused with a status, never read.
        let status =
            unsafe { sys::napi_get_value_string_utf16(env, value, ptr::null_mut(), 0, &mut units) };
        if status != sys::Status::napi_ok {
            // Not a string: napi-rs's own conversion refuses it, naming the value's type, as a
            // `String` argument always did.
            // SAFETY: the same env and value napi-rs passed here.
            return unsafe { String::from_napi_value(env, value) }.map(JsText);
        }
        // Room for the terminating NUL that Node-API always writes.
        let capacity = units
            .checked_mul(MAX_UTF8_PER_UNIT)
            .and_then(|n| n.checked_add(1))
            .ok_or_else(|| Error::new(Status::InvalidArg, "A string too long to store."))?;
        let mut bytes: Vec<u8> = Vec::with_capacity(capacity);
        let mut written = 0usize;
        napi::check_status!(
            // SAFETY: the buffer holds `capacity` bytes; Node-API writes at most
            // `capacity - 1` bytes of UTF-8 and a NUL, and reports how many bytes it wrote.
            unsafe {
                sys::napi_get_value_string_utf8(
                    env,
                    value,
                    bytes.as_mut_ptr().cast(),
                    capacity,
                    &mut written,
                )
            },
            "Failed to convert napi `string` into rust type `String`"
        )?;
        // SAFETY: `written <= capacity - 1` bytes were initialised just above.
        unsafe { bytes.set_len(written.min(capacity - 1)) };
        // The bound is 3x: give back what the text did not use before it waits in a batch.
        if bytes.capacity() > bytes.len() + bytes.len() / 2 + 64 {
            bytes.shrink_to_fit();
        }
        // SAFETY: V8 wrote UTF-8, replacing what has no UTF-8 form (napi-rs's `String` relies
        // on the same).
        Ok(JsText(unsafe { String::from_utf8_unchecked(bytes) }))
    }
}

impl TypeName for JsText {
    fn type_name() -> &'static str {
        "string"
    }

    fn value_type() -> ValueType {
        ValueType::String
    }
}
