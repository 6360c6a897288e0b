//! Durations from numbers users give (options, delays, leases): never a panic, however large
//! or odd the number. `Duration::from_secs_f64` panics past ~5.8e11 years and on NaN.

use std::time::Duration;

/// The longest wait, delay or lease represented: 100 years, which means "never" in practice
/// and keeps `Instant + duration` and timer arithmetic far from overflow.
pub const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `value` seconds; zero for NaN or negative values, [`LONGEST`] for anything longer.
pub fn secs(value: f64) -> Duration {
    if value.is_nan() || value <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(value).map_or(LONGEST, |d| d.min(LONGEST))
}

/// `value` milliseconds, as [`secs`].
pub fn millis(value: f64) -> Duration {
    secs(value / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_numbers_become_bounded_durations() {
        assert_eq!(secs(f64::NAN), Duration::ZERO);
        assert_eq!(secs(-1.0), Duration::ZERO);
        assert_eq!(secs(f64::NEG_INFINITY), Duration::ZERO);
        assert_eq!(secs(f64::INFINITY), LONGEST);
        assert_eq!(secs(1e300), LONGEST);
        assert_eq!(millis(f64::MAX), LONGEST);
        assert_eq!(millis(1500.0), Duration::from_millis(1500));
        assert_eq!(secs(3600.0), Duration::from_secs(3600));
    }
}
