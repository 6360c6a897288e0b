//! A pointer that only the thread that made it can have: state that lives on one JavaScript
//! thread (its event loop calls back into it) may sit in a Send + Sync napi object, and a
//! call from any other thread then gets nothing to touch instead of undefined behaviour.

use std::thread::ThreadId;

/// A pointer reached only on the thread that made it: elsewhere there is none.
pub struct OwnedByThread<T> {
    pointer: *mut T,
    owner: ThreadId,
}

// SAFETY: the pointer is handed out on its owner thread only, so moving or sharing this
// across threads reaches nothing.
unsafe impl<T> Send for OwnedByThread<T> {}
// SAFETY: as for Send: a shared reference hands the pointer out on the owner thread only.
unsafe impl<T> Sync for OwnedByThread<T> {}

impl<T> OwnedByThread<T> {
    pub fn new(pointer: *mut T) -> Self {
        Self {
            pointer,
            owner: std::thread::current().id(),
        }
    }

    pub fn get(&self) -> Option<*mut T> {
        (std::thread::current().id() == self.owner).then_some(self.pointer)
    }
}

#[cfg(test)]
mod tests {
    use super::OwnedByThread;

    #[test]
    fn the_pointer_is_handed_out_on_its_owner_thread_only() {
        let mut value = 7u32;
        let owned = OwnedByThread::new(&mut value as *mut u32);
        assert_eq!(owned.get(), Some(&mut value as *mut u32));
        let elsewhere = std::thread::scope(|scope| {
            scope
                .spawn(|| owned.get().is_some())
                .join()
                .expect("the thread ran")
        });
        assert!(!elsewhere);
    }
}
