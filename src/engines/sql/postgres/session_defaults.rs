//! What our PostgreSQL connections do where the DSN and the server's configuration are silent:
//! choices that only cost less, never change what is stored or who can read it.

use sqlx::postgres::{PgConnectOptions, PgSslMode};
use std::net::IpAddr;

/// Run on each new connection: large bodies are TOAST-compressed with lz4 rather than pglz,
/// which costs the server several times less CPU per row (pglz spends milliseconds on a
/// 100 KB body, even one it then stores uncompressed). Compression is per value, so every
/// reader, upstream's included, decompresses either transparently. Only where nobody chose a
/// method (the setting's source is still the default) and the server has lz4 (PostgreSQL 14
/// or later, built with it); otherwise the statement matches no row and changes nothing.
pub const SESSION_SETUP: &str = "SELECT set_config('default_toast_compression', 'lz4', false) \
     FROM pg_settings WHERE name = 'default_toast_compression' AND source = 'default' \
     AND 'lz4' = ANY(enumvals)";

/// `options` without TLS when the DSN names a loopback host and says nothing of `sslmode`
/// (nor does `PGSSLMODE`). The driver's default, `prefer`, encrypts whenever the server can,
/// which on loopback protects no wire and costs both sides a cipher pass over every message;
/// upstream's driver (`pg`) uses no TLS unless asked. Any other host keeps `prefer`.
pub fn plain_on_loopback(options: PgConnectOptions, driver_url: &str) -> PgConnectOptions {
    let chose_mode = url::Url::parse(driver_url).is_ok_and(|url| {
        url.query_pairs()
            .any(|(key, _)| key == "sslmode" || key == "ssl-mode")
    }) || std::env::var_os("PGSSLMODE").is_some();
    if chose_mode || options.get_socket().is_some() || !is_loopback(options.get_host()) {
        return options;
    }
    options.ssl_mode(PgSslMode::Disable)
}

/// Whether `host` names this machine (`localhost`, a loopback address).
pub(super) fn is_loopback(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn mode(url: &str) -> PgSslMode {
        let options = PgConnectOptions::from_str(url).expect("valid url");
        plain_on_loopback(options, url).get_ssl_mode()
    }

    #[test]
    fn loopback_without_a_chosen_mode_goes_plain() {
        if std::env::var_os("PGSSLMODE").is_some() {
            return;
        }
        for url in [
            "postgres://u@127.0.0.1:5432/db",
            "postgres://u@localhost/db",
            "postgres://u@[::1]:5432/db",
            "postgres://u@127.0.0.2/db",
        ] {
            assert!(matches!(mode(url), PgSslMode::Disable), "{url}");
        }
    }

    #[test]
    fn a_chosen_mode_or_another_host_is_kept() {
        assert!(matches!(
            mode("postgres://u@127.0.0.1/db?sslmode=require"),
            PgSslMode::Require
        ));
        let mut prefer = vec!["postgres://u@127.0.0.1/db?sslmode=prefer"];
        if std::env::var_os("PGSSLMODE").is_none() {
            prefer.extend(["postgres://u@db.example/db", "postgres://u@10.0.0.5/db"]);
        }
        for url in prefer {
            assert!(matches!(mode(url), PgSslMode::Prefer), "{url}");
        }
    }
}
