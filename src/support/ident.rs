//! Identifier and name validation. Identifiers are interpolated into SQL text (table names
//! cannot be bound), so they pass an allowlist first; everything else is a bound parameter.

use crate::support::error::{Error, Result};

/// Longest table name accepted: the index name `<table>_claim_idx` must stay within
/// PostgreSQL's 63-byte identifier limit (upstream's bound, kept for mixed fleets).
pub const MAX_TABLE_NAME_LEN: usize = 48;
/// `queue_name` is `VARCHAR(190)`.
pub const MAX_QUEUE_NAME_LEN: usize = 190;

/// Checks a table name against `^[a-z_][a-z0-9_]{0,47}$`. Lowercase only: PostgreSQL folds
/// the unquoted `LISTEN` channel to lowercase while `pg_notify` uses the string verbatim.
pub fn validate_table_name(name: &str) -> Result<()> {
    let bytes = name.as_bytes();
    let valid = !bytes.is_empty()
        && bytes.len() <= MAX_TABLE_NAME_LEN
        && (bytes[0].is_ascii_lowercase() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'_');
    if valid {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "Invalid tableName {}: it must match /^[a-z_][a-z0-9_]{{0,47}}$/ (lowercase letters, digits and underscores, at most {MAX_TABLE_NAME_LEN} characters).",
            quote_for_message(name)
        )))
    }
}

/// Checks that a queue name has 1 to 190 characters (UTF-16 code units, as JavaScript counts)
/// and no NUL, which no SQL text column accepts (PostgreSQL refuses it at the first send).
pub fn validate_queue_name(name: &str) -> Result<()> {
    if name.contains('\0') {
        return Err(Error::invalid_argument(
            "Invalid queueName: it must not contain the NUL character (\\0).",
        ));
    }
    let len = name.encode_utf16().count();
    if (1..=MAX_QUEUE_NAME_LEN).contains(&len) {
        Ok(())
    } else {
        Err(Error::invalid_argument(format!(
            "Invalid queueName: it must have between 1 and {MAX_QUEUE_NAME_LEN} characters, got {len}."
        )))
    }
}

/// Quotes a user value for an error message, shortened so a huge input does not flood logs.
fn quote_for_message(value: &str) -> String {
    let short: String = value.chars().take(64).collect();
    let ellipsis = if short.len() < value.len() { "…" } else { "" };
    format!("{:?}{ellipsis}", short)
}

/// Whether a message id is a decimal id as the SQL engines issue them.
pub fn is_decimal_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_lowercase_names() {
        for name in ["messenger_messages", "_q", "a", "t1_2", &"a".repeat(48)] {
            assert!(validate_table_name(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn rejects_injection_and_case_and_length() {
        for name in [
            "",
            "Messages",
            "1abc",
            "messages; DROP TABLE x",
            "messages\"",
            "a-b",
            "a b",
            "schema.table",
            "messages--",
            "tablé",
            &"a".repeat(49),
        ] {
            let err = validate_table_name(name).unwrap_err();
            assert_eq!(
                err.kind,
                crate::support::error::ErrorKind::InvalidArgument,
                "{name}"
            );
        }
    }

    #[test]
    fn queue_names_are_bounded_in_utf16_units() {
        assert!(validate_queue_name("default").is_ok());
        assert!(validate_queue_name(&"q".repeat(190)).is_ok());
        assert!(validate_queue_name("").is_err());
        assert!(validate_queue_name(&"q".repeat(191)).is_err());
        // 95 emoji are 190 UTF-16 units; one more is too long.
        assert!(validate_queue_name(&"🎉".repeat(95)).is_ok());
        assert!(validate_queue_name(&"🎉".repeat(96)).is_err());
    }

    #[test]
    fn queue_names_with_nul_are_refused_up_front() {
        let err = validate_queue_name("a\0b").unwrap_err();
        assert_eq!(err.kind, crate::support::error::ErrorKind::InvalidArgument);
        assert!(err.message.contains("NUL"), "{}", err.message);
    }

    #[test]
    fn decimal_ids() {
        assert!(is_decimal_id("42"));
        assert!(!is_decimal_id(""));
        assert!(!is_decimal_id("-1"));
        assert!(!is_decimal_id("1-0"));
        assert!(!is_decimal_id("abc"));
    }
}
