//! What `sslmode` means in a DSN, as `pg` (node-postgres 8, the driver of the TypeScript
//! transport) reads it, so that the same DSN never gets weaker TLS here than it had there.
//!
//! `pg` verifies the server's certificate and host for `prefer`, `require`, `verify-ca` and
//! `verify-full` alike (libpq encrypts without verifying for the first two); `no-verify`
//! encrypts without verifying; `disable` does not encrypt. With `uselibpqcompat=true` the modes
//! mean what libpq says, and `verify-ca` needs `sslrootcert`. `ssl=true` (or `1`) without a mode
//! is verified TLS, `ssl=false` (or `0`) none. Without any of these the connection options
//! decide (see `session_defaults`). sqlx reads libpq's meaning, so the mode is set here
//! explicitly and the parameters sqlx does not know are taken out of the URL it parses.

use sqlx::postgres::PgSslMode;

/// The TLS a DSN asks for (sqlx's `PgSslMode`, which has no equality).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    pub fn for_sqlx(self) -> PgSslMode {
        match self {
            SslMode::Disable => PgSslMode::Disable,
            SslMode::Prefer => PgSslMode::Prefer,
            SslMode::Require => PgSslMode::Require,
            SslMode::VerifyCa => PgSslMode::VerifyCa,
            SslMode::VerifyFull => PgSslMode::VerifyFull,
        }
    }
}

/// The URL for sqlx to parse, and the TLS mode the DSN chose (None: it chose none).
#[derive(Debug, PartialEq, Eq)]
pub struct TlsChoice {
    pub url: String,
    pub mode: Option<SslMode>,
}

const MODE_KEYS: [&str; 2] = ["sslmode", "ssl-mode"];

/// Reads the DSN's TLS parameters as `pg` does; an error says what is wrong with them.
pub fn tls_choice(driver_url: &str) -> Result<TlsChoice, String> {
    let mut url = url::Url::parse(driver_url).map_err(|e| e.to_string())?;
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let last = |key: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let sslmode = MODE_KEYS.iter().find_map(|key| last(key));
    let libpq = match last("uselibpqcompat") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(format!(
                "uselibpqcompat must be true or false, got \"{other}\""
            ))
        }
    };
    let has_root_cert = last("sslrootcert").is_some();
    let mode = match (sslmode, libpq) {
        (Some("disable"), _) => Some(SslMode::Disable),
        (Some("prefer"), true) => Some(SslMode::Prefer),
        (Some("require"), true) => Some(SslMode::Require),
        (Some("verify-ca"), true) if !has_root_cert => {
            return Err(
                "sslmode=verify-ca with uselibpqcompat=true needs sslrootcert (the CA to verify against); use sslmode=verify-full to verify against the system's CAs"
                    .to_owned(),
            )
        }
        (Some("verify-ca"), true) => Some(SslMode::VerifyCa),
        (Some("no-verify"), false) => Some(SslMode::Require),
        // Every other mode, known or not, is verified TLS to `pg`.
        (Some(_), _) => Some(SslMode::VerifyFull),
        (None, _) => match last("ssl") {
            Some("true" | "1") => Some(SslMode::VerifyFull),
            Some("false" | "0") => Some(SslMode::Disable),
            _ => None,
        },
    };
    // `no-verify` never verifies, not even against a CA the DSN names (sqlx would).
    let drop_root_cert = mode == Some(SslMode::Require) && !libpq;
    let kept: Vec<&(String, String)> = pairs
        .iter()
        .filter(|(k, _)| {
            !MODE_KEYS.contains(&k.as_str())
                && k != "uselibpqcompat"
                && k != "ssl"
                && !(drop_root_cert && k == "sslrootcert")
        })
        .collect();
    if kept.is_empty() {
        url.set_query(None);
    } else {
        url.query_pairs_mut()
            .clear()
            .extend_pairs(kept.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }
    Ok(TlsChoice {
        url: url.into(),
        mode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(query: &str) -> Option<SslMode> {
        tls_choice(&format!("postgres://u:p@db.example:5432/app?{query}"))
            .expect("valid")
            .mode
    }

    #[test]
    fn pg_verifies_every_mode_but_disable_and_no_verify() {
        for m in ["prefer", "require", "verify-ca", "verify-full", "allow"] {
            assert_eq!(
                mode(&format!("sslmode={m}")),
                Some(SslMode::VerifyFull),
                "{m}"
            );
        }
        assert_eq!(mode("sslmode=disable"), Some(SslMode::Disable));
        assert_eq!(mode("sslmode=no-verify"), Some(SslMode::Require));
        assert_eq!(mode("application_name=x"), None);
    }

    #[test]
    fn libpq_compat_keeps_libpq_meanings() {
        assert_eq!(
            mode("uselibpqcompat=true&sslmode=prefer"),
            Some(SslMode::Prefer)
        );
        assert_eq!(
            mode("uselibpqcompat=true&sslmode=require"),
            Some(SslMode::Require)
        );
        assert_eq!(
            mode("uselibpqcompat=true&sslmode=verify-ca&sslrootcert=/ca.pem"),
            Some(SslMode::VerifyCa)
        );
        assert_eq!(
            mode("uselibpqcompat=true&sslmode=verify-full"),
            Some(SslMode::VerifyFull)
        );
        assert!(tls_choice("postgres://h/db?uselibpqcompat=true&sslmode=verify-ca").is_err());
        assert!(tls_choice("postgres://h/db?uselibpqcompat=yes").is_err());
    }

    #[test]
    fn ssl_flag_without_a_mode() {
        assert_eq!(mode("ssl=true"), Some(SslMode::VerifyFull));
        assert_eq!(mode("ssl=1"), Some(SslMode::VerifyFull));
        assert_eq!(mode("ssl=0"), Some(SslMode::Disable));
        assert_eq!(mode("ssl=true&sslmode=no-verify"), Some(SslMode::Require));
    }

    #[test]
    fn sqlx_gets_only_parameters_it_knows() {
        let choice = tls_choice(
            "postgres://u:p@h/db?sslmode=no-verify&sslrootcert=/ca.pem&uselibpqcompat=false&application_name=a%20b",
        )
        .expect("valid");
        assert_eq!(choice.url, "postgres://u:p@h/db?application_name=a+b");
        let choice =
            tls_choice("postgres://u:p@h/db?sslmode=require&sslrootcert=/ca.pem").expect("valid");
        assert_eq!(choice.url, "postgres://u:p@h/db?sslrootcert=%2Fca.pem");
        let choice = tls_choice("postgres://u:p@h/db?sslmode=disable").expect("valid");
        assert_eq!(choice.url, "postgres://u:p@h/db");
    }
}
