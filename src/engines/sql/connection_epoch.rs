//! Connections made unfit at once: when a connection of a DSN meets a server that takes no
//! writes (a writer demoted in place by a failover, a standby the name now reaches), or a
//! pooler its statements were not made for, the connections opened before are not handed out
//! again. A leaf: the pool's acquire hook (`target::server_pool_options`) and the target that
//! hears the errors share it.

use crate::support::locks::Locked;
use std::time::{Duration, Instant};

/// When a connection of a DSN last met a server that takes no writes (a writer demoted in
/// place by a failover, a standby) or a pooler found out late: the pool hands out no
/// connection opened before then, so the next statement connects anew, to wherever the DSN's
/// name points now, as the target now knows to talk to it.
#[derive(Debug, Default)]
pub struct ConnectionEpoch {
    marked_at: std::sync::Mutex<Option<Instant>>,
}

impl ConnectionEpoch {
    /// The connections opened until now are unfit.
    pub fn mark(&self) {
        *self.marked_at.locked() = Some(Instant::now());
    }

    /// Whether a connection of age `age` was opened before the last mark.
    pub fn predates(&self, age: Duration) -> bool {
        self.marked_at.locked().is_some_and(|at| age > at.elapsed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_connections_opened_before_the_mark_are_stale() {
        let epoch = ConnectionEpoch::default();
        assert!(
            !epoch.predates(Duration::from_secs(3600)),
            "nothing marked yet"
        );
        epoch.mark();
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            epoch.predates(Duration::from_secs(1)),
            "opened a second ago"
        );
        assert!(
            !epoch.predates(Duration::from_millis(5)),
            "opened after the mark"
        );
    }
}
