//! The server's clock as this process can tell it: the offset of the server's `NOW(3)` (in
//! the session's own time zone, as claim tokens are) from the local clock, noted whenever the
//! server says what time it is. A send stored claimed stamps its claim from it, so that the
//! stamp travels as a bound value in the one statement; the statement itself refuses a stamp
//! outside the window the server's own clock allows, so a stale offset costs a fallback, never
//! a wrong lease.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Default)]
pub struct ServerClock {
    offset_us: AtomicI64,
    known: AtomicBool,
}

impl ServerClock {
    /// The server said its time was `server_us` (a token) no earlier than just now.
    pub fn note(&self, server_us: i64) {
        self.offset_us
            .store(server_us - local_us(), Ordering::Relaxed);
        self.known.store(true, Ordering::Release);
    }

    /// The server's time now, as a token, if it was ever noted. It may lag the server by up
    /// to the round trip that noted it (the reply came after the server read its clock).
    pub fn now_us(&self) -> Option<i64> {
        self.known
            .load(Ordering::Acquire)
            .then(|| local_us() + self.offset_us.load(Ordering::Relaxed))
    }
}

fn local_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_until_noted_then_follows_the_local_clock() {
        let clock = ServerClock::default();
        assert_eq!(clock.now_us(), None);
        clock.note(local_us() + 3_600_000_000);
        let ahead = clock.now_us().expect("noted") - local_us();
        assert!((3_599_000_000..=3_600_000_000).contains(&ahead));
    }
}
