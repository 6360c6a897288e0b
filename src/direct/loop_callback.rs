//! A JavaScript function called straight from the JavaScript thread's own libuv callbacks
//! (the direct path's poll and timer, see `direct_sends`), the way Node.js calls back from
//! its own I/O: `napi_make_callback` under an async context of ours, which runs the promise
//! jobs and `process.nextTick` queue when it returns. A threadsafe function called from that
//! thread would instead queue the call and wake the loop again (an eventfd written, polled
//! and read) before JavaScript sees the outcome: three system calls and a turn of the loop
//! per sequential send.
//!
//! Only ever called where no napi call is running and none of the caller's state is
//! borrowed: the function may do anything, including closing what called it.

use napi::sys;
use std::ptr;

/// The async resource name `async_hooks` shows for these calls.
const RESOURCE_NAME: &str = "nestjs-messenger-native:send";

pub struct LoopCallback {
    env: sys::napi_env,
    function: sys::napi_ref,
    context: sys::napi_async_context,
}

impl LoopCallback {
    /// # Safety
    /// On the JavaScript thread of `env`, inside a napi call; `function` a function value.
    pub unsafe fn new(env: sys::napi_env, function: sys::napi_value) -> Option<Self> {
        let mut name = ptr::null_mut();
        let mut reference = ptr::null_mut();
        let mut context = ptr::null_mut();
        // SAFETY: as the caller promises; each out-pointer is a local.
        unsafe {
            if sys::napi_create_string_utf8(
                env,
                RESOURCE_NAME.as_ptr().cast(),
                RESOURCE_NAME.len() as isize,
                &mut name,
            ) != sys::Status::napi_ok
                || sys::napi_create_reference(env, function, 1, &mut reference)
                    != sys::Status::napi_ok
            {
                return None;
            }
            if sys::napi_async_init(env, ptr::null_mut(), name, &mut context)
                != sys::Status::napi_ok
            {
                sys::napi_delete_reference(env, reference);
                return None;
            }
        }
        Some(Self {
            env,
            function: reference,
            context,
        })
    }

    /// Calls the function with the values `arguments` makes. Returns false if it could not be
    /// called (the environment is going away): the caller reports another way.
    ///
    /// # Safety
    /// On the JavaScript thread, from a libuv callback (no napi call running).
    pub unsafe fn call(
        &self,
        arguments: impl FnOnce(sys::napi_env) -> napi::Result<Vec<sys::napi_value>>,
    ) -> bool {
        let env = self.env;
        let mut scope = ptr::null_mut();
        // SAFETY: on the JavaScript thread outside any napi call, where Node.js itself opens
        // handle scopes for its own callbacks.
        if unsafe { sys::napi_open_handle_scope(env, &mut scope) } != sys::Status::napi_ok {
            return false;
        }
        // SAFETY: inside the scope opened above, on the JavaScript thread.
        let called = unsafe { self.call_in_scope(arguments) };
        // SAFETY: the scope opened above, closed once.
        unsafe { sys::napi_close_handle_scope(env, scope) };
        called
    }

    unsafe fn call_in_scope(
        &self,
        arguments: impl FnOnce(sys::napi_env) -> napi::Result<Vec<sys::napi_value>>,
    ) -> bool {
        let env = self.env;
        let mut function = ptr::null_mut();
        let mut receiver = ptr::null_mut();
        // SAFETY: the reference is alive until Drop; out-pointers are locals.
        unsafe {
            if sys::napi_get_reference_value(env, self.function, &mut function)
                != sys::Status::napi_ok
                || function.is_null()
                // The receiver must be an object (`undefined` is refused): the global one.
                || sys::napi_get_global(env, &mut receiver) != sys::Status::napi_ok
            {
                return false;
            }
        }
        // Everything that can fail before the call is behind: from here the arguments are
        // JavaScript's, and a failure past this point is an environment going away.
        let Ok(values) = arguments(env) else {
            return false;
        };
        let mut result = ptr::null_mut();
        // SAFETY: values from this scope; the context lives until Drop.
        let status = unsafe {
            sys::napi_make_callback(
                env,
                self.context,
                receiver,
                function,
                values.len(),
                values.as_ptr(),
                &mut result,
            )
        };
        if status == sys::Status::napi_pending_exception {
            // Thrown by the function: it goes where any callback's exception goes.
            let mut error = ptr::null_mut();
            // SAFETY: an exception is pending on this env.
            unsafe {
                if sys::napi_get_and_clear_last_exception(env, &mut error) == sys::Status::napi_ok {
                    sys::napi_fatal_exception(env, error);
                }
            }
        }
        // Called, whatever it did: the outcome is JavaScript's now.
        status == sys::Status::napi_ok || status == sys::Status::napi_pending_exception
    }
}

impl Drop for LoopCallback {
    fn drop(&mut self) {
        // SAFETY: made in `new` on this env's thread, which is where the owner is dropped.
        unsafe {
            sys::napi_async_destroy(self.env, self.context);
            sys::napi_delete_reference(self.env, self.function);
        }
    }
}
