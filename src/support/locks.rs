//! The one way this crate takes a `std::sync::Mutex`. A panic while a guard was held (a bug
//! already reported where it happened) leaves the data as the panicking code left it; every
//! lock here guards bookkeeping that stays usable then, so the poison is ignored rather than
//! turned into a second panic on the next caller, which may be a settle or a close.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `lock()` that ignores poisoning (see the module).
pub trait Locked<T: ?Sized> {
    fn locked(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> Locked<T> for Mutex<T> {
    fn locked(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::Locked;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_lock_poisoned_by_a_panic_is_still_taken() {
        let shared = Arc::new(Mutex::new(1));
        let held = shared.clone();
        let panicked = std::thread::spawn(move || {
            let mut guard = held.locked();
            *guard = 2;
            panic!("while holding the lock");
        })
        .join();
        assert!(panicked.is_err());
        assert!(shared.is_poisoned());
        assert_eq!(*shared.locked(), 2);
    }
}
