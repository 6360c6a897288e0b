//! How the shared poll compares queue names on MySQL/MariaDB: as the table's `queue_name`
//! column does. The poll joins the table to the names it binds (one JSON array, read by
//! `JSON_TABLE`), and a `JSON_TABLE` column has a collation of its own: compared as it is, the
//! server either refuses the mix (two implicit collations) or converts the table's column, and
//! the claim index no longer serves. Converted to the column's character set and collation,
//! the names compare as the claims' do (a case-insensitive collation matches `Orders` to
//! `orders`), and each is one lookup in the claim index. A binary string column compares
//! them byte for byte as they are.
//!
//! An `IN` list of literals would need no catalog, but the server's range optimizer plans
//! every literal again on every poll, even on an empty table, and costs more than the join.

use super::per_table::PerTable;
use crate::engines::sql::driver::SqlResult;
use sqlx::{MySqlConnection, Row};

/// A table's `queue_name` column, as the catalog describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameColumn {
    /// A text column: its character set and collation (checked to be plain identifiers
    /// before they are written into a statement).
    Text { charset: String, collation: String },
    /// A binary string column (`VARBINARY`): names compare byte for byte, as they are.
    Binary,
}

/// What is known of the tables of one server: each one's `queue_name` column.
#[derive(Default)]
pub struct NameColumns {
    columns: PerTable<NameColumn>,
}

impl NameColumns {
    /// `table`'s `queue_name` column; the catalog is asked once per table. A table the
    /// catalog does not show (dropped since) fails the poll, which each consumer's claim then
    /// meets as usual, and the catalog is asked again at the next poll.
    pub async fn of(&self, conn: &mut MySqlConnection, table: &str) -> SqlResult<NameColumn> {
        if let Some(known) = self.columns.known(table) {
            return Ok(known);
        }
        let row = sqlx::query(
            "SELECT CHARACTER_SET_NAME AS charset, COLLATION_NAME AS collation \
             FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'queue_name'",
        )
        .bind(table)
        .fetch_optional(conn)
        .await?
        .ok_or_else(|| {
            sqlx::Error::Protocol(format!(
                "the catalog shows no queue_name column in table {table}"
            ))
        })?;
        let charset: Option<String> = row.try_get("charset")?;
        let collation: Option<String> = row.try_get("collation")?;
        let column = match (charset, collation) {
            (None, None) => NameColumn::Binary,
            (charset, collation) => NameColumn::Text {
                charset: plain_name(charset)?,
                collation: plain_name(collation)?,
            },
        };
        self.columns.remember(table, column.clone());
        Ok(column)
    }

    /// Forgets what was read of `table` (its poll failed: the table may have been recreated).
    pub fn forget(&self, table: &str) {
        self.columns.forget(table);
    }
}

/// A character set or collation name as the catalog gave it, refused unless it is a plain
/// identifier (it is written into the statement's text).
fn plain_name(name: Option<String>) -> SqlResult<String> {
    match name {
        Some(name)
            if !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
        {
            Ok(name)
        }
        other => Err(sqlx::Error::Protocol(format!(
            "the catalog gave queue_name an unexpected character set or collation: {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_are_written_into_a_statement() {
        assert_eq!(
            plain_name(Some("utf8mb4_unicode_ci".into())).ok(),
            Some("utf8mb4_unicode_ci".to_owned())
        );
        assert!(plain_name(Some("x') OR 1=1 --".into())).is_err());
        assert!(plain_name(Some(String::new())).is_err());
        assert!(plain_name(None).is_err());
    }
}
