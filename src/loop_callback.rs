//! A JavaScript function called straight from a libuv callback on the JavaScript thread (the
//! direct sends' replies), inside Node's callback scope so promise reactions run right after
//! it, as they do after any I/O callback. A threadsafe function would cost an async handle's
//! wake-up and another turn of the loop for each call.

use napi::bindgen_prelude::ToNapiValue;
use napi::{sys, Env};
use std::ptr;

pub struct LoopCallback {
    env: sys::napi_env,
    function: sys::napi_ref,
    context: sys::napi_async_context,
}

impl LoopCallback {
    /// Keeps `function` (a JavaScript function of `env`) for calls from the loop.
    pub fn new<'f>(env: &Env, function: &impl napi::JsValue<'f>) -> Option<Self> {
        let (env, function) = (env.raw(), function.raw());
        let mut reference = ptr::null_mut();
        let mut resource = ptr::null_mut();
        let mut name = ptr::null_mut();
        let mut context = ptr::null_mut();
        // SAFETY: called on the JavaScript thread during a napi call, with its env.
        unsafe {
            let ok = sys::napi_create_reference(env, function, 1, &mut reference)
                == sys::Status::napi_ok
                && sys::napi_create_object(env, &mut resource) == sys::Status::napi_ok
                && sys::napi_create_string_utf8(
                    env,
                    c"nestjs-messenger-native:sends".as_ptr(),
                    -1, /* NAPI_AUTO_LENGTH: NUL-terminated */
                    &mut name,
                ) == sys::Status::napi_ok
                && sys::napi_async_init(env, resource, name, &mut context) == sys::Status::napi_ok;
            if !ok {
                if !reference.is_null() {
                    sys::napi_delete_reference(env, reference);
                }
                return None;
            }
        }
        Some(Self {
            env,
            function: reference,
            context,
        })
    }

    /// Calls the function with `argument`. An exception it throws is reported as uncaught.
    ///
    /// # Safety
    /// On the JavaScript thread, from a libuv callback (not within another napi call), while
    /// the env lives.
    pub unsafe fn call<T: ToNapiValue>(&self, argument: T) {
        let env = self.env;
        let mut scope = ptr::null_mut();
        // SAFETY: per this function's contract.
        unsafe {
            if sys::napi_open_handle_scope(env, &mut scope) != sys::Status::napi_ok {
                return;
            }
            let mut function = ptr::null_mut();
            // napi_make_callback takes an object as `this` (undefined is a TypeError).
            let mut receiver = ptr::null_mut();
            let mut result = ptr::null_mut();
            if sys::napi_get_reference_value(env, self.function, &mut function)
                == sys::Status::napi_ok
                && sys::napi_get_global(env, &mut receiver) == sys::Status::napi_ok
            {
                if let Ok(value) = T::to_napi_value(env, argument) {
                    let status = sys::napi_make_callback(
                        env,
                        self.context,
                        receiver,
                        function,
                        1,
                        &value,
                        &mut result,
                    );
                    if status == sys::Status::napi_pending_exception {
                        let mut error = ptr::null_mut();
                        if sys::napi_get_and_clear_last_exception(env, &mut error)
                            == sys::Status::napi_ok
                        {
                            sys::napi_fatal_exception(env, error);
                        }
                    }
                }
            }
            sys::napi_close_handle_scope(env, scope);
        }
    }
}

impl Drop for LoopCallback {
    fn drop(&mut self) {
        // SAFETY: dropped on the JavaScript thread (with the direct sends that own it).
        unsafe {
            sys::napi_async_destroy(self.env, self.context);
            sys::napi_delete_reference(self.env, self.function);
        }
    }
}
