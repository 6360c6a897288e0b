//! A claimed message handed to JavaScript on the consumer's hot path, as the array
//! `[id, body, headers]`. An object with named fields costs V8 a key lookup and a map
//! transition per field on every message; an array's elements cost neither. ASCII text (ids
//! always, bodies and headers mostly) becomes a one-byte string by a copy, with no UTF-8 decode.

use crate::queue::engine::StoredMessage;
use napi::bindgen_prelude::{ToNapiValue, TypeName, ValueType};
use napi::{check_status, sys};
use std::ptr;

/// The fields in their array order (JavaScript reads them by index).
pub struct JsMessage(pub StoredMessage);

impl ToNapiValue for JsMessage {
    unsafe fn to_napi_value(env: sys::napi_env, message: Self) -> napi::Result<sys::napi_value> {
        let StoredMessage {
            id, body, headers, ..
        } = message.0;
        let mut array = ptr::null_mut();
        check_status!(
            // SAFETY: `env` is the live env napi-rs passed in; `array` receives the new value.
            unsafe { sys::napi_create_array_with_length(env, 3, &mut array) },
            "Failed to create a message array"
        )?;
        for (index, text) in [id, body, headers].iter().enumerate() {
            // SAFETY: as above; the text outlives the call, which copies it.
            let value = unsafe { js_string(env, text) }?;
            check_status!(
                // SAFETY: `array` was created just above in this env; index < 3.
                unsafe { sys::napi_set_element(env, array, index as u32, value) },
                "Failed to fill a message array"
            )?;
        }
        Ok(array)
    }
}

impl TypeName for JsMessage {
    fn type_name() -> &'static str {
        "[string, string, string]"
    }

    fn value_type() -> ValueType {
        ValueType::Object
    }
}

/// A JavaScript string with the text of `text`.
///
/// # Safety
/// `env` must be a live env on its JavaScript thread.
unsafe fn js_string(env: sys::napi_env, text: &str) -> napi::Result<sys::napi_value> {
    let mut value = ptr::null_mut();
    let (bytes, len) = (text.as_ptr().cast(), text.len() as isize);
    // SAFETY: `bytes` holds `len` bytes; Latin-1 is a superset of ASCII, so ASCII text
    // copies as is, and anything else goes through the UTF-8 decoder.
    let status = unsafe {
        if text.is_ascii() {
            sys::napi_create_string_latin1(env, bytes, len, &mut value)
        } else {
            sys::napi_create_string_utf8(env, bytes, len, &mut value)
        }
    };
    check_status!(status, "Failed to create a message string")?;
    Ok(value)
}
