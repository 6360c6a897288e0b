//! How a consumer meets failed claims and idle waits: once the server was reached, connection
//! failures are waited out with capped, jittered pauses, and refusals (credentials, unknown
//! database) are surfaced after a few tries, so `get()` neither dies on a restart nor spins
//! silently on a rotated password.

use crate::support::backoff::Backoff;
use crate::support::error::{Error, ErrorKind, Result};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A consumer that met a server refusal (credentials, unknown database) this many times in a
/// row surfaces it: the core Worker then stops instead of spinning silently.
const REFUSALS_SURFACED_AFTER: u32 = 3;
/// Pauses of a consumer riding out an outage: from 100 ms, doubling, at most 5 s, jittered.
const OUTAGE_FIRST_PAUSE: Duration = Duration::from_millis(100);
const OUTAGE_MAX_PAUSE: Duration = Duration::from_secs(5);

/// A consumer's current run of failed claims or waits.
pub struct Outage {
    backoff: Backoff,
    refusals: u32,
}

impl Default for Outage {
    fn default() -> Self {
        Self {
            backoff: Backoff::new(OUTAGE_FIRST_PAUSE, OUTAGE_MAX_PAUSE),
            refusals: 0,
        }
    }
}

impl Outage {
    /// A consumer's answer to a failed claim or idle wait: once the server was reached, a
    /// connection failure is waited out with capped, jittered pauses (a restart, a killed
    /// connection, a short network loss: `get()` neither throws nor ends); a refusal
    /// (credentials, unknown database) is surfaced after `REFUSALS_SURFACED_AFTER` tries in
    /// a row; anything else, and anything before first contact, is surfaced at once.
    pub async fn ride_out(
        &mut self,
        err: Error,
        contacted: bool,
        cancel: &CancellationToken,
    ) -> Result<()> {
        if err.kind != ErrorKind::Connection || !contacted {
            return Err(err);
        }
        if err.persistent {
            self.refusals += 1;
            if self.refusals >= REFUSALS_SURFACED_AFTER {
                return Err(err);
            }
        }
        let pause = self.backoff.next_pause();
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = cancel.cancelled() => {}
        }
        Ok(())
    }
}
