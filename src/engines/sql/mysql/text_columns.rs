//! How message text is bound on MySQL/MariaDB: as bytes where the table's `body` and `headers`
//! columns are utf8mb4, as text otherwise. A text parameter is measured by the server one
//! character at a time before it is stored (its length in characters and its repertoire), a
//! large share of the server's CPU for a large body. A bytes parameter
//! skips that and is still checked as well-formed as it is copied into the column. Our text
//! is always UTF-8, so bytes store exactly what text would, but only into utf8mb4 columns: a
//! table whose DDL chose another character set (a migration's own) keeps text parameters,
//! which the server converts.

use super::per_table::PerTable;
use sqlx::mysql::MySqlArguments;
use sqlx::query::Query;
use sqlx::{MySql, MySqlConnection, Row};

/// What is known of the tables of one server: whether each one's text columns are utf8mb4.
#[derive(Default)]
pub struct TextColumns {
    utf8mb4: PerTable<bool>,
}

impl TextColumns {
    /// Whether `table`'s message text goes as bytes; the catalog is asked once per table.
    /// If it cannot be asked (the connection failed: the send that follows meets and reports
    /// it), text is bound this time and the catalog asked again next time.
    pub async fn bytes_for(&self, conn: &mut MySqlConnection, table: &str) -> bool {
        if let Some(known) = self.utf8mb4.known(table) {
            return known;
        }
        let asked = sqlx::query(
            "SELECT COUNT(*) AS count FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? \
             AND COLUMN_NAME IN ('body', 'headers') AND CHARACTER_SET_NAME = 'utf8mb4'",
        )
        .bind(table)
        .fetch_one(conn)
        .await
        .and_then(|row| row.try_get::<i64, _>("count"));
        let Ok(count) = asked else {
            return false;
        };
        let utf8mb4 = count == 2;
        self.utf8mb4.remember(table, utf8mb4);
        utf8mb4
    }
}

/// Binds `text` as bytes or as text (see the module doc).
pub fn bind_text<'q>(
    query: Query<'q, MySql, MySqlArguments>,
    text: &'q str,
    as_bytes: bool,
) -> Query<'q, MySql, MySqlArguments> {
    if as_bytes {
        query.bind(text.as_bytes())
    } else {
        query.bind(text)
    }
}
