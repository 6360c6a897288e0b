//! TCP keepalive for every server connection, so that a peer that went silent (a dropped NAT
//! entry, a host gone without a reset) is noticed within about 30 s even on an idle or blocked
//! connection, and `TCP_USER_TIMEOUT` (Linux) so that unacknowledged writes fail within the
//! same bound instead of retransmitting for minutes.
//!
//! Only sockets the addon opens itself get them: Redis connections, from the `redis` crate as it
//! opens them, and the direct send connection. SQL connections are opened by sqlx, which sets
//! no socket option; their waits are bounded by statement bounds and liveness checks instead.

use std::time::Duration;

/// Idle time before the first probe.
const PROBE_AFTER: Duration = Duration::from_secs(15);
/// Time between unanswered probes.
const PROBE_EVERY: Duration = Duration::from_secs(5);
/// Unanswered probes before the connection is dropped.
#[cfg(any(target_os = "linux", target_os = "macos", target_os = "windows"))]
const PROBES: u32 = 3;
/// How long written data may stay unacknowledged before the connection is dropped.
#[cfg(target_os = "linux")]
pub const USER_TIMEOUT: Duration = Duration::from_secs(30);

/// The keepalive every connection gets.
pub fn keepalive() -> socket2::TcpKeepalive {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(PROBE_AFTER)
        .with_interval(PROBE_EVERY);
    #[cfg(any(target_os = "linux", target_os = "macos", target_os = "windows"))]
    let keepalive = keepalive.with_retries(PROBES);
    keepalive
}
