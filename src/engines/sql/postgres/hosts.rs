//! Where a PostgreSQL DSN's connections go: its host, or each of several in turn
//! (`postgres://u@a:5432,b:5433/db`, as libpq and pgjdbc take them), and which server may
//! serve them (libpq's `target_session_attrs`): any, or only one that takes writes
//! (`read-write`, `primary`). A queue writes, so the modes that ask for a server that takes
//! none (`read-only`, `standby`, `prefer-standby`) are refused.
//!
//! The pools connect to the current host. First contact tries the hosts in order, as libpq
//! does on connecting (`Hosts::settle`); a new connection to a server that does not fit, a
//! connection lost, or a server that refuses writes has them tried again in the background
//! (`Hosts::look_again`), and the pools connect to the first that fits from then on.

use crate::support::locks::Locked;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool};
use sqlx::{ConnectOptions, Connection, Executor, Row};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PARAMETER: &str = "target_session_attrs";

/// The servers a DSN's connections may stay on (`target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAttrs {
    /// Whichever answers first (libpq's default).
    Any,
    /// One whose sessions take writes (`SHOW transaction_read_only` is `off`).
    ReadWrite,
    /// One that is not in recovery (`pg_is_in_recovery()` is false).
    Primary,
}

/// The DSN split into one URL per host (each with the DSN's credentials, database and
/// parameters, `target_session_attrs` taken out), and the servers that may serve.
#[derive(Debug, PartialEq, Eq)]
pub struct HostUrls {
    pub urls: Vec<String>,
    pub attrs: SessionAttrs,
}

/// Reads `driver_url`'s hosts and `target_session_attrs`; an error says what is wrong.
pub fn host_urls(driver_url: &str) -> Result<HostUrls, String> {
    let (scheme, rest) = driver_url
        .split_once("://")
        .ok_or_else(|| "expected postgres://…".to_owned())?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let mut attrs = SessionAttrs::Any;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != PARAMETER {
            kept.push(pair);
            continue;
        }
        attrs = match value {
            "any" => SessionAttrs::Any,
            "read-write" => SessionAttrs::ReadWrite,
            "primary" => SessionAttrs::Primary,
            "read-only" | "standby" | "prefer-standby" => {
                return Err(format!(
                    "{PARAMETER}={value} asks for a server that takes no writes, and the transport writes: use read-write, primary or any"
                ))
            }
            other => {
                return Err(format!(
                    "{PARAMETER} must be any, read-write or primary, got \"{other}\""
                ))
            }
        };
    }
    let query = if kept.is_empty() {
        String::new()
    } else {
        format!("?{}", kept.join("&"))
    };
    let urls = hosts
        .split(',')
        .map(|host| {
            if host.is_empty() && hosts.contains(',') {
                return Err("a host of the list is empty".to_owned());
            }
            Ok(format!("{scheme}://{userinfo}{host}{path}{query}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(HostUrls { urls, attrs })
}

/// A target's hosts and the one its pool connects to now.
pub struct Hosts {
    options: Vec<PgConnectOptions>,
    attrs: SessionAttrs,
    /// A pass over the hosts is under way.
    looking: AtomicBool,
    /// The pools that connect where the hosts point (the queries' and the LISTEN
    /// connection's); let go when the target closes (the pool's connect hook holds these
    /// hosts).
    pools: Mutex<Vec<PgPool>>,
    connect_timeout: Duration,
    /// First contact's pass over the hosts, run once.
    settled: tokio::sync::OnceCell<()>,
}

impl Hosts {
    pub fn new(options: Vec<PgConnectOptions>, attrs: SessionAttrs, timeout: Duration) -> Self {
        Self {
            options,
            attrs,
            looking: AtomicBool::new(false),
            pools: Mutex::default(),
            connect_timeout: timeout,
            settled: tokio::sync::OnceCell::new(),
        }
    }

    /// The options the pool starts with: the first host's.
    pub fn first(&self) -> &PgConnectOptions {
        &self.options[0]
    }

    /// Whether there is a choice to make at all.
    fn chooses(&self) -> bool {
        self.several() || self.attrs != SessionAttrs::Any
    }

    /// Whether the DSN lists several hosts.
    pub fn several(&self) -> bool {
        self.options.len() > 1
    }

    /// Lets the hosts move `pool` from one host to the next.
    pub fn steer(&self, pool: &PgPool) {
        if self.several() {
            self.pools.locked().push(pool.clone());
        }
    }

    /// The target closes: the pools are let go.
    pub fn release(&self) {
        self.pools.locked().clear();
    }

    /// Checks a new connection of the pool: a server that does not fit is left, and the hosts
    /// are looked over again (the pool connects anew, to where they point then).
    pub async fn check(self: &Arc<Self>, conn: &mut PgConnection) -> Result<(), sqlx::Error> {
        if !self.chooses() || fits(conn, self.attrs).await? {
            return Ok(());
        }
        self.look_again();
        Err(sqlx::Error::Configuration(
            format!("the server takes no writes ({PARAMETER} asks for one that does)").into(),
        ))
    }

    /// The current host failed or refuses writes: the hosts are looked over again in the
    /// background (one pass at a time), and the pools connect to the first that fits.
    pub fn look_again(self: &Arc<Self>) {
        if !self.several() || self.looking.swap(true, Ordering::AcqRel) {
            return;
        }
        let hosts = self.clone();
        tokio::spawn(async move {
            hosts.first_fitting().await;
            hosts.looking.store(false, Ordering::Release);
        });
    }

    /// Once, before first contact: tries the hosts in order, as libpq does on connecting, and
    /// has the pools connect to the first that answers and fits.
    pub async fn settle(&self) {
        if self.several() {
            self.settled.get_or_init(|| self.first_fitting()).await;
        }
    }

    async fn first_fitting(&self) {
        for options in &self.options {
            let attempt = async {
                let mut conn = options.connect().await?;
                let fits = fits(&mut conn, self.attrs).await;
                let _ = conn.close().await;
                fits
            };
            if let Ok(Ok(true)) = tokio::time::timeout(self.connect_timeout, attempt).await {
                for pool in self.pools.locked().iter() {
                    pool.set_connect_options(options.clone());
                }
                return;
            }
        }
    }
}

/// Whether the server on `conn` may serve: for `read-write`, its sessions take writes (not a
/// standby, not a writer demoted in place with `default_transaction_read_only`); for
/// `primary`, it is not in recovery.
async fn fits(conn: &mut PgConnection, attrs: SessionAttrs) -> Result<bool, sqlx::Error> {
    let check = match attrs {
        SessionAttrs::Any => return Ok(true),
        SessionAttrs::ReadWrite => "SELECT current_setting('transaction_read_only') = 'off'",
        SessionAttrs::Primary => "SELECT NOT pg_is_in_recovery()",
    };
    // A simple query: it prepares nothing (a pooler may be in between).
    conn.fetch_one(check).await?.try_get(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_the_hosts_and_reads_the_attrs() {
        let split = host_urls(
            "postgres://u:p%40w@a:5432,b:5433,[::1]:5434/db?sslmode=disable&target_session_attrs=read-write",
        )
        .unwrap();
        assert_eq!(split.attrs, SessionAttrs::ReadWrite);
        assert_eq!(
            split.urls,
            [
                "postgres://u:p%40w@a:5432/db?sslmode=disable",
                "postgres://u:p%40w@b:5433/db?sslmode=disable",
                "postgres://u:p%40w@[::1]:5434/db?sslmode=disable",
            ]
        );
        let one = host_urls("postgresql://h/db").unwrap();
        assert_eq!(one.urls, ["postgresql://h/db"]);
        assert_eq!(one.attrs, SessionAttrs::Any);
        assert_eq!(
            host_urls("postgres://h/db?target_session_attrs=primary")
                .unwrap()
                .attrs,
            SessionAttrs::Primary
        );
    }

    #[test]
    fn refuses_modes_that_take_no_writes_and_unknown_ones() {
        for mode in ["read-only", "standby", "prefer-standby"] {
            let refused =
                host_urls(&format!("postgres://h/db?target_session_attrs={mode}")).unwrap_err();
            assert!(refused.contains("takes no writes"), "{refused}");
        }
        let unknown = host_urls("postgres://h/db?target_session_attrs=writer").unwrap_err();
        assert!(unknown.contains("\"writer\""), "{unknown}");
        assert!(host_urls("postgres://a,,b/db").is_err());
    }
}
