//! DSN parsing: which dialect or engine a DSN names, and which parts of it are secret.
//!
//! The DSN itself is handed to the driver unchanged (its query parameters are the driver's,
//! as with upstream); this module only classifies it and makes it safe to print.

use crate::support::error::{Error, Result};
use percent_encoding::percent_decode_str;

/// The SQL dialects a DSN can name (their facts are in `crate::engines::sql::facts_of`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    MySql,
    Sqlite,
}

/// A parsed SQL DSN. Its `Debug` shows only the redacted form.
#[derive(Clone)]
pub struct SqlDsn {
    pub dialect: Dialect,
    /// The DSN as the driver should see it (`mariadb:` rewritten to `mysql:`).
    pub driver_url: String,
    /// The DSN with its password replaced by `***`, for messages.
    pub redacted: String,
    /// Every form of the password found in the DSN (and in `listen`'s), to scrub from driver
    /// messages.
    pub secrets: Vec<String>,
    /// PostgreSQL only: where the LISTEN connection goes instead (the `listenDsn` option).
    pub listen: Option<Box<SqlDsn>>,
}

const SUPPORTED: &str = "postgres://, postgresql://, mysql://, mariadb://, sqlite://";

/// Parses a SQL DSN. Errors are connection errors, as upstream raises for a bad DSN.
pub fn parse_sql_dsn(dsn: &str) -> Result<SqlDsn> {
    let secrets = secrets_of(dsn);
    let redacted = redact_dsn(dsn);
    let Some((scheme, rest)) = dsn.split_once(':') else {
        return Err(Error::connection(format!(
            "Invalid SQL DSN: \"{redacted}\"."
        )));
    };
    let valid_scheme = !scheme.is_empty()
        && scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !valid_scheme {
        return Err(Error::connection(format!(
            "Invalid SQL DSN: \"{redacted}\"."
        )));
    }
    let dialect = match scheme.to_ascii_lowercase().as_str() {
        "postgres" | "postgresql" => Dialect::Postgres,
        "mysql" | "mariadb" => Dialect::MySql,
        "sqlite" => Dialect::Sqlite,
        other => {
            return Err(Error::connection(format!(
                "Unsupported SQL DSN scheme \"{other}:\"; use one of {SUPPORTED}."
            )))
        }
    };
    // A PostgreSQL DSN may list several hosts (`a:5432,b:5433`), which a URL cannot hold:
    // checked with its first.
    let checked = match dialect {
        Dialect::Postgres => first_host_only(dsn),
        _ => std::borrow::Cow::Borrowed(dsn),
    };
    if dialect != Dialect::Sqlite && url::Url::parse(&checked).is_err() {
        return Err(Error::connection(format!(
            "Invalid SQL DSN: \"{redacted}\"."
        )));
    }
    if dialect == Dialect::MySql {
        refuse_mysql2_ssl(dsn, &redacted)?;
    }
    let driver_url = match dialect {
        Dialect::MySql => format!("mysql:{rest}"),
        _ => dsn.to_owned(),
    };
    Ok(SqlDsn {
        dialect,
        driver_url,
        redacted,
        secrets,
        listen: None,
    })
}

/// `dsn` with only the first host of a host list (`postgres://u@a:1,b:2/db` → `…@a:1/db`).
fn first_host_only(dsn: &str) -> std::borrow::Cow<'_, str> {
    let Some(after_scheme) = dsn.find("://").map(|i| i + 3) else {
        return dsn.into();
    };
    let rest = &dsn[after_scheme..];
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let hosts_from = authority.rfind('@').map_or(0, |at| at + 1);
    match authority[hosts_from..].find(',') {
        Some(comma) => {
            let cut = after_scheme + hosts_from + comma;
            format!("{}{}", &dsn[..cut], &dsn[after_scheme + authority.len()..]).into()
        }
        None => dsn.into(),
    }
}

impl SqlDsn {
    /// This DSN with `listen` (the `listenDsn` option, PostgreSQL only) as its LISTEN
    /// connection's DSN; its secrets are scrubbed from messages too.
    pub fn with_listen(mut self, listen: Option<&str>) -> Result<Self> {
        let Some(listen) = listen else {
            return Ok(self);
        };
        let parsed = parse_sql_dsn(listen).map_err(|e| {
            Error::connection(format!("Invalid listenDsn: {}", e.message)).redacted(&self.secrets)
        })?;
        if self.dialect != Dialect::Postgres || parsed.dialect != Dialect::Postgres {
            return Err(Error::invalid_argument(format!(
                "listenDsn applies only to PostgreSQL (a postgres:// DSN for a postgres:// dsn), got \"{}\".",
                parsed.redacted
            ))
            .redacted(&self.secrets));
        }
        self.secrets.extend(parsed.secrets.iter().cloned());
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        self.listen = Some(Box::new(parsed));
        Ok(self)
    }
}

/// mysql2 reads an `ssl` URL parameter (a JSON object of TLS options, or a profile name) that
/// the MySQL driver here does not: left alone it would be ignored and the connection get less
/// TLS than the same DSN gets from mysql2, so it is refused, naming what to write instead.
fn refuse_mysql2_ssl(dsn: &str, redacted: &str) -> Result<()> {
    let names_ssl = url::Url::parse(dsn).is_ok_and(|url| {
        url.query_pairs()
            .any(|(key, _)| key.eq_ignore_ascii_case("ssl"))
    });
    if names_ssl {
        return Err(Error::connection(format!(
            "Invalid SQL DSN \"{redacted}\": the `ssl` parameter (mysql2's TLS options) is not read here; use ssl-mode=VERIFY_IDENTITY (with ssl-ca=<CA file> for a private CA) for verified TLS, or ssl-mode=REQUIRED for TLS without verification."
        )));
    }
    Ok(())
}

/// A parsed Redis DSN (`redis://[user:password@]host[:port][/db]`, `rediss://` for TLS). Its
/// `Debug` shows only the redacted form.
#[derive(Clone)]
pub struct RedisDsn {
    pub url: String,
    pub tls: bool,
    pub redacted: String,
    pub secrets: Vec<String>,
}

impl std::fmt::Debug for SqlDsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlDsn")
            .field("dialect", &self.dialect)
            .field("dsn", &self.redacted)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for RedisDsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDsn")
            .field("dsn", &self.redacted)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// Parses a Redis DSN. Errors are connection errors, as upstream raises for a bad DSN.
pub fn parse_redis_dsn(dsn: &str) -> Result<RedisDsn> {
    let secrets = secrets_of(dsn);
    let redacted = redact_dsn(dsn);
    let url = url::Url::parse(dsn)
        .map_err(|_| Error::connection(format!("Invalid Redis DSN: \"{redacted}\".")))?;
    let tls = match url.scheme() {
        "redis" => false,
        "rediss" => true,
        other => {
            return Err(Error::connection(format!(
                "Unsupported Redis DSN scheme \"{other}:\" in \"{redacted}\". Use redis:// or rediss://."
            )))
        }
    };
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Error::connection(format!(
            "Invalid Redis DSN: \"{redacted}\" has no host."
        )));
    }
    let db = url.path().trim_start_matches('/');
    if !db.is_empty() && db.parse::<u32>().is_err() {
        return Err(Error::connection(format!(
            "Invalid Redis DSN: \"{redacted}\": the path must be a database number."
        )));
    }
    Ok(RedisDsn {
        url: dsn.to_owned(),
        tls,
        redacted,
        secrets,
    })
}

/// The `user:password@` part's password, if any, as written and percent-decoded.
fn secrets_of(dsn: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    let mut push = |raw: &str| {
        if raw.is_empty() {
            return;
        }
        secrets.push(raw.to_owned());
        if let Ok(decoded) = percent_decode_str(raw).decode_utf8() {
            if decoded != raw {
                secrets.push(decoded.into_owned());
            }
        }
    };
    if let Some((start, end)) = userinfo_span(dsn) {
        if let Some((_, password)) = dsn[start..end].split_once(':') {
            push(password);
        }
    }
    if let Some((_, query)) = dsn.split_once('?') {
        for pair in query.split('&') {
            if let Some((key, value)) = pair.split_once('=') {
                if key.eq_ignore_ascii_case("password") || key.eq_ignore_ascii_case("pass") {
                    push(value);
                }
            }
        }
    }
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets
}

/// Byte range of the userinfo, if present. A password may hold unescaped `@`, `/`, `?` or `#`
/// (a URL parser would end the authority at them): so when a `user:` starts the authority (no
/// `@` before its colon) and an `@` follows anywhere later, everything up to the last `@` is
/// taken as userinfo: redacting too much is safe, too little is not. Otherwise the userinfo
/// is what precedes the authority's last `@`.
fn userinfo_span(dsn: &str) -> Option<(usize, usize)> {
    let start = dsn.find("://")? + 3;
    let rest = &dsn[start..];
    let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    if let (Some(colon), Some(at)) = (rest.find(':'), rest.rfind('@')) {
        if colon < authority_len && colon < at && !rest[..colon].contains('@') {
            return Some((start, start + at));
        }
    }
    rest[..authority_len]
        .rfind('@')
        .map(|at| (start, start + at))
}

/// The DSN with any password replaced by `***` (in the userinfo and in query parameters).
pub fn redact_dsn(dsn: &str) -> String {
    let mut out = dsn.to_owned();
    if let Some((start, end)) = userinfo_span(dsn) {
        if let Some(colon) = dsn[start..end].find(':') {
            out = format!("{}***{}", &dsn[..start + colon + 1], &dsn[end..]);
        }
    }
    crate::support::error::redact(&out, &secrets_of(dsn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_each_scheme_to_its_engine() {
        for (dsn, engine) in [
            ("postgres://u@localhost/db", Dialect::Postgres),
            ("postgresql://u@localhost:5432/db", Dialect::Postgres),
            ("mysql://root@127.0.0.1:3306/test", Dialect::MySql),
            ("mariadb://root@127.0.0.1:3306/test", Dialect::MySql),
            ("sqlite://data/queue.db", Dialect::Sqlite),
            ("POSTGRES://u@h/db", Dialect::Postgres),
        ] {
            assert_eq!(parse_sql_dsn(dsn).unwrap().dialect, engine, "{dsn}");
        }
    }

    #[test]
    fn mariadb_is_handed_to_the_driver_as_mysql() {
        let dsn = parse_sql_dsn("mariadb://root@127.0.0.1:3306/test").unwrap();
        assert_eq!(dsn.driver_url, "mysql://root@127.0.0.1:3306/test");
        let refused = parse_sql_dsn(r#"mysql://root:pw@h/test?ssl={"rejectUnauthorized":true}"#)
            .expect_err("mysql2's ssl parameter");
        assert!(
            refused.message.contains("`ssl` parameter"),
            "{}",
            refused.message
        );
        assert!(!refused.message.contains("pw"), "{}", refused.message);
        assert!(parse_sql_dsn("mysql://root@h/test?ssl-mode=REQUIRED").is_ok());
    }

    #[test]
    fn rejects_an_unknown_scheme_naming_the_supported_ones() {
        let err = parse_sql_dsn("http://localhost/x").unwrap_err();
        assert_eq!(err.kind, crate::support::error::ErrorKind::Connection);
        assert!(err.message.contains("http:"), "{}", err.message);
        assert!(err.message.contains("postgresql://"), "{}", err.message);
        assert!(err.message.contains("sqlite://"), "{}", err.message);
    }

    #[test]
    fn rejects_malformed_dsns_without_echoing_the_password() {
        for dsn in [
            "not a dsn",
            "postgres://u:hunter2@[bad",
            "://u:hunter2@x",
            "",
        ] {
            let err = parse_sql_dsn(dsn).unwrap_err();
            assert_eq!(
                err.kind,
                crate::support::error::ErrorKind::Connection,
                "{dsn}"
            );
            assert!(!err.message.contains("hunter2"), "{}", err.message);
        }
    }

    #[test]
    fn collects_raw_and_decoded_passwords() {
        let dsn = parse_sql_dsn("postgres://app:p%40ss%3Aword@db:5432/x").unwrap();
        assert!(dsn.secrets.contains(&"p%40ss%3Aword".to_owned()));
        assert!(dsn.secrets.contains(&"p@ss:word".to_owned()));
        assert_eq!(dsn.redacted, "postgres://app:***@db:5432/x");
    }

    #[test]
    fn redacts_query_passwords_too() {
        let dsn = parse_sql_dsn("postgres://db/x?user=app&password=topsecret").unwrap();
        assert!(dsn.secrets.contains(&"topsecret".to_owned()));
        assert!(!dsn.redacted.contains("topsecret"));
    }

    #[test]
    fn a_dsn_without_password_has_no_secret() {
        let dsn = parse_sql_dsn("postgres://postgres@127.0.0.1:5432/test").unwrap();
        assert!(dsn.secrets.is_empty());
        assert_eq!(dsn.redacted, "postgres://postgres@127.0.0.1:5432/test");
    }

    #[test]
    fn at_signs_in_passwords_use_the_last_one() {
        let dsn = parse_sql_dsn("postgres://u:a@b@host/db").unwrap();
        assert_eq!(dsn.redacted, "postgres://u:***@host/db");
        assert!(dsn.secrets.contains(&"a@b".to_owned()));
    }
    #[test]
    fn passwords_with_reserved_characters_never_show() {
        for reserved in "/?#@:[]!$&'()*+,;=% ".chars() {
            let password = format!("pa{reserved}ss{reserved}word");
            for scheme in ["postgres", "mysql", "redis"] {
                let dsn = format!("{scheme}://user:{password}@127.0.0.1:1/db");
                let shown = match scheme {
                    "redis" => match parse_redis_dsn(&dsn) {
                        Ok(parsed) => format!("{} {:?}", parsed.redacted, parsed),
                        Err(err) => err.message,
                    },
                    _ => match parse_sql_dsn(&dsn) {
                        Ok(parsed) => format!("{} {:?}", parsed.redacted, parsed),
                        Err(err) => err.message,
                    },
                };
                assert!(!shown.contains(&password), "{dsn}: {shown}");
                assert!(!shown.contains("ss{reserved}word"), "{dsn}: {shown}");
            }
        }
    }

    #[test]
    fn passwords_with_an_at_sign_then_a_slash_never_show() {
        for dsn in [
            "redis://default:p@ss/w\u{f6}rd@127.0.0.1:1/0",
            "postgres://postgres:p@s s/w\u{f6}rd@127.0.0.1:1/test",
            "mysql://root:p@ss/w?rd@127.0.0.1:1/test",
        ] {
            let shown = if dsn.starts_with("redis") {
                parse_redis_dsn(dsn).map_or_else(|e| e.message, |d| d.redacted)
            } else {
                parse_sql_dsn(dsn).map_or_else(|e| e.message, |d| d.redacted)
            };
            assert!(!shown.contains("ss/w"), "{dsn}: {shown}");
            assert!(!shown.contains("s s/w"), "{dsn}: {shown}");
            assert!(shown.contains("127.0.0.1"), "{dsn}: {shown}");
        }
        // A port's colon after the user is not a password.
        let plain = parse_sql_dsn("mysql://root@127.0.0.1:3306/test?x=a@b").unwrap();
        assert_eq!(plain.redacted, "mysql://root@127.0.0.1:3306/test?x=a@b");
    }

    #[test]
    fn a_postgres_dsn_may_list_hosts() {
        let dsn = parse_sql_dsn("postgres://u:pw@a:5432,b:5433/db?target_session_attrs=read-write")
            .expect("a host list is a valid PostgreSQL DSN");
        assert_eq!(dsn.secrets, ["pw"]);
        assert!(!dsn.redacted.contains("pw"), "{}", dsn.redacted);
        assert_eq!(
            first_host_only("postgres://u@a:1,b:2/db?x=1"),
            "postgres://u@a:1/db?x=1"
        );
        assert!(parse_sql_dsn("mysql://u@a:1,b:2/db").is_err());
    }

    #[test]
    fn a_listen_dsn_is_postgres_only_and_its_password_is_a_secret() {
        let dsn = parse_sql_dsn("postgres://u:pooled@bouncer:6432/db?pgbouncer=true")
            .and_then(|d| d.with_listen(Some("postgres://u:direct@db:5432/db")))
            .unwrap();
        assert_eq!(
            dsn.listen.as_ref().map(|l| l.redacted.as_str()),
            Some("postgres://u:***@db:5432/db")
        );
        assert!(dsn.secrets.contains(&"direct".to_owned()));
        assert!(dsn.secrets.contains(&"pooled".to_owned()));
        let mysql = parse_sql_dsn("mysql://root:pw@h/test")
            .and_then(|d| d.with_listen(Some("postgres://u@db/db")))
            .unwrap_err();
        assert_eq!(
            mysql.kind,
            crate::support::error::ErrorKind::InvalidArgument
        );
        let bad = parse_sql_dsn("postgres://u@h/db")
            .and_then(|d| d.with_listen(Some("postgres://u:hunter2@[bad")))
            .unwrap_err();
        assert!(bad.message.contains("listenDsn"), "{}", bad.message);
        assert!(!bad.message.contains("hunter2"), "{}", bad.message);
    }

    #[test]
    fn debug_shows_no_secret() {
        let sql = parse_sql_dsn("postgres://u:hunter2@h/db").unwrap();
        let redis = parse_redis_dsn("redis://u:hunter2@h:6379").unwrap();
        assert!(!format!("{sql:?} {redis:?}").contains("hunter2"));
    }

    #[test]
    fn redis_dsns() {
        let plain = parse_redis_dsn("redis://localhost:6379").unwrap();
        assert!(!plain.tls);
        let full = parse_redis_dsn("redis://user:pa55@host:6390/2").unwrap();
        assert_eq!(full.redacted, "redis://user:***@host:6390/2");
        assert!(full.secrets.contains(&"pa55".to_owned()));
        assert!(parse_redis_dsn("rediss://secure:6379").unwrap().tls);
        for bad in [
            "not a url",
            "http://localhost:6379",
            "redis://:pw@/0",
            "redis://h/notadb",
        ] {
            let err = parse_redis_dsn(bad).unwrap_err();
            assert_eq!(
                err.kind,
                crate::support::error::ErrorKind::Connection,
                "{bad}"
            );
            assert!(!err.message.contains("pw@"), "{}", err.message);
        }
        assert!(parse_redis_dsn("http://x")
            .unwrap_err()
            .message
            .contains("redis:// or rediss://"));
    }
}
