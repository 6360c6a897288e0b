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

/// How often in a row a consumer meets its table, stream or group gone before it surfaces
/// that: autoSetup re-creates it before the next claim, so a second miss in a row means the
/// re-creation does not cure it.
const MISSING_SURFACED_AFTER: u32 = 2;

/// A consumer's current run of failed claims or waits.
pub struct Outage {
    backoff: Backoff,
    refusals: u32,
    missing: u32,
}

impl Default for Outage {
    fn default() -> Self {
        Self {
            backoff: Backoff::new(OUTAGE_FIRST_PAUSE, OUTAGE_MAX_PAUSE),
            refusals: 0,
            missing: 0,
        }
    }
}

impl Outage {
    /// A consumer's answer to a failed claim or idle wait: once the server was reached, a
    /// connection failure is waited out with capped, jittered pauses (a restart, a killed
    /// connection, a short network loss: `get()` neither throws nor ends); a refusal
    /// (credentials, unknown database) is surfaced after `REFUSALS_SURFACED_AFTER` tries in
    /// a row; a table, stream or group gone is re-created by the next claim where `recreates`
    /// (autoSetup), and surfaced only if that does not cure it; anything else, and anything
    /// before first contact, is surfaced at once.
    pub async fn ride_out(
        &mut self,
        err: Error,
        contacted: bool,
        recreates: bool,
        cancel: &CancellationToken,
    ) -> Result<()> {
        if err.kind == ErrorKind::NotFound && recreates && contacted {
            // Gone under a live consumer (a server restarted empty, a stream or group deleted):
            // the next claim re-creates it first, at once the first time.
            self.missing += 1;
            if self.missing > MISSING_SURFACED_AFTER {
                return Err(err);
            }
            if self.missing == 1 {
                return Ok(());
            }
        } else if err.kind != ErrorKind::Connection || !contacted {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn gone() -> Error {
        Error::new(ErrorKind::NotFound, "no such group")
    }

    #[tokio::test]
    async fn a_table_stream_or_group_gone_is_ridden_through_only_where_auto_setup_re_creates_it() {
        let cancel = CancellationToken::new();
        let mut outage = Outage::default();
        // Re-created before the next claim: the consumer goes on, twice in a row at most.
        assert!(outage.ride_out(gone(), true, true, &cancel).await.is_ok());
        cancel.cancel(); // no pause to wait out in a test
        assert!(outage.ride_out(gone(), true, true, &cancel).await.is_ok());
        assert!(outage.ride_out(gone(), true, true, &cancel).await.is_err());
        // Without autoSetup, or before first contact, it is surfaced at once.
        let mut fresh = Outage::default();
        assert!(fresh.ride_out(gone(), true, false, &cancel).await.is_err());
        assert!(fresh.ride_out(gone(), false, true, &cancel).await.is_err());
    }
}
