//! The server check made on first contact: claims need `FOR UPDATE SKIP LOCKED` and the
//! idle consumers' shared poll `JSON_TABLE`, which MySQL has from 8.0.4 and MariaDB from 10.6.

use crate::support::error::{Error, Result};

/// Fails unless the server has `FOR UPDATE SKIP LOCKED` and `JSON_TABLE`: MySQL ≥ 8.0.4,
/// MariaDB ≥ 10.6.
pub fn check_server_version(version: &str) -> Result<()> {
    let mariadb = version.to_ascii_lowercase().contains("mariadb");
    let numbers: Vec<u32> = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|part| !part.is_empty())
        .take(3)
        .filter_map(|part| part.parse().ok())
        .collect();
    let found = (
        numbers.first().copied().unwrap_or(0),
        numbers.get(1).copied().unwrap_or(0),
        numbers.get(2).copied().unwrap_or(0),
    );
    let (minimum, name) = if mariadb {
        ((10, 6, 0), "MariaDB 10.6")
    } else {
        ((8, 0, 4), "MySQL 8.0.4")
    };
    if found >= minimum {
        Ok(())
    } else {
        Err(Error::connection(format!(
            "MySQL transport needs FOR UPDATE SKIP LOCKED and JSON_TABLE, which this server ({version}) lacks: the minimum is {name}."
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_versions() {
        assert!(check_server_version("10.11.19-MariaDB-0+deb12u1").is_ok());
        assert!(check_server_version("10.6.0-MariaDB").is_ok());
        assert!(check_server_version("8.0.4").is_ok());
        assert!(check_server_version("8.4.3").is_ok());
        let old_maria = check_server_version("10.5.23-MariaDB").unwrap_err();
        assert!(
            old_maria.message.contains("MariaDB 10.6"),
            "{}",
            old_maria.message
        );
        let old_mysql = check_server_version("5.7.44-log").unwrap_err();
        assert!(
            old_mysql.message.contains("MySQL 8.0.4"),
            "{}",
            old_mysql.message
        );
        assert!(check_server_version("8.0.3").is_err());
    }
}
