//! The doctor's verdicts: one [`Check`] per line, collected in a [`Report`], and the version
//! comparison every engine's "server version" check uses. No I/O here.

use std::fmt;

/// A check's verdict. `Warn` never fails the run; `Fail` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    /// As printed and as `--json` carries it.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One line of the doctor's report: what was checked, the verdict, a short detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
}

/// The checks of one run, in the order they ran. Details pass through [`Report::push`], which
/// scrubs the DSN's secrets from them, so no check can print a password.
#[derive(Debug, Default)]
pub struct Report {
    pub checks: Vec<Check>,
    secrets: Vec<String>,
}

impl Report {
    pub fn new(secrets: &[String]) -> Self {
        Self {
            checks: Vec::new(),
            secrets: secrets.to_vec(),
        }
    }

    /// Whether every check passed (warnings included).
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Fail)
    }

    pub fn push(&mut self, name: &str, status: Status, detail: impl fmt::Display) {
        self.checks.push(Check {
            name: name.to_owned(),
            status,
            detail: crate::support::error::redact(&detail.to_string(), &self.secrets),
        });
    }

    pub fn pass(&mut self, name: &str, detail: impl fmt::Display) {
        self.push(name, Status::Ok, detail);
    }

    pub fn warn(&mut self, name: &str, detail: impl fmt::Display) {
        self.push(name, Status::Warn, detail);
    }

    pub fn fail(&mut self, name: &str, detail: impl fmt::Display) {
        self.push(name, Status::Fail, detail);
    }
}

/// The first three numbers of a version string (`"10.11.19-MariaDB-0+deb12u1"` → 10.11.19,
/// `"15.20 (Debian …)"` → 15.20.0); missing parts are 0.
pub fn version_numbers(text: &str) -> (u32, u32, u32) {
    // The first word only: what follows (a distribution's own version) is not the server's.
    let mut numbers = text
        .split_whitespace()
        .next()
        .unwrap_or("")
        .split(|c: char| !c.is_ascii_digit())
        .filter(|part| !part.is_empty())
        .map(|part| part.parse::<u32>().unwrap_or(u32::MAX));
    (
        numbers.next().unwrap_or(0),
        numbers.next().unwrap_or(0),
        numbers.next().unwrap_or(0),
    )
}

/// The version check's line (`server version`, or for an embedded database the library's):
/// ok when `found` is at least `minimum`, a failure naming the minimum (and what needs it)
/// otherwise.
pub fn judge_version(
    report: &mut Report,
    name: &str,
    product: &str,
    found: &str,
    minimum: (u32, u32, u32),
    needed_for: &str,
) {
    let (a, b, c) = minimum;
    if version_numbers(found) >= minimum {
        report.pass(name, format!("{found} (minimum {product} {a}.{b}.{c})"));
    } else {
        report.fail(
            name,
            format!("{found} is older than the minimum {product} {a}.{b}.{c} ({needed_for})"),
        );
    }
}

/// The clock line: how far the server's clock is from this host's, measured at the middle of
/// the round trip. Only a warning past a second: the transports use the server's clock for
/// every time they store, so skew only misleads people reading times.
pub fn judge_clock(report: &mut Report, server_ms: f64, sent_ms: f64, received_ms: f64) {
    let skew = server_ms - (sent_ms + received_ms) / 2.0;
    let rtt = (received_ms - sent_ms).max(0.0);
    let side = if skew >= 0.0 { "ahead of" } else { "behind" };
    let detail = format!(
        "server clock {:.0} ms {side} this host (±{:.0} ms round trip)",
        skew.abs(),
        rtt / 2.0
    );
    if skew.abs() > 1000.0 {
        report.warn(
            "clock",
            format!("{detail}; times shown by stats are the server's"),
        );
    } else {
        report.pass("clock", detail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_their_numbers() {
        assert_eq!(version_numbers("10.11.19-MariaDB-0+deb12u1"), (10, 11, 19));
        assert_eq!(
            version_numbers("15.20 (Debian 15.20-0+deb12u1)"),
            (15, 20, 0)
        );
        assert_eq!(version_numbers("7.0.15"), (7, 0, 15));
        assert_eq!(version_numbers(""), (0, 0, 0));
        let mut report = Report::default();
        judge_version(
            &mut report,
            "server version",
            "Redis",
            "6.2.0",
            (6, 2, 0),
            "XAUTOCLAIM",
        );
        judge_version(
            &mut report,
            "server version",
            "Redis",
            "6.0.16",
            (6, 2, 0),
            "XAUTOCLAIM",
        );
        assert_eq!(report.checks[0].status, Status::Ok);
        assert_eq!(report.checks[1].status, Status::Fail);
        assert!(report.checks[1].detail.contains("Redis 6.2.0 (XAUTOCLAIM)"));
        assert!(!report.ok());
    }

    #[test]
    fn details_never_carry_a_secret() {
        let mut report = Report::new(&["hunter2".to_owned()]);
        report.fail("connect", "login hunter2 refused");
        assert_eq!(report.checks[0].detail, "login *** refused");
    }

    #[test]
    fn clock_skew_warns_past_a_second() {
        let mut report = Report::default();
        judge_clock(&mut report, 1_000_010.0, 1_000_000.0, 1_000_004.0);
        judge_clock(&mut report, 997_000.0, 1_000_000.0, 1_000_004.0);
        assert_eq!(report.checks[0].status, Status::Ok);
        assert!(report.checks[0].detail.contains("8 ms ahead"));
        assert_eq!(report.checks[1].status, Status::Warn);
        assert!(report.checks[1].detail.contains("behind"));
        assert!(report.ok());
    }
}
