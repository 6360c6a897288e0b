//! MySQL/MariaDB's SQL for one table, built once (the table name is allowlisted before it
//! gets here): upstream's DDL (LONGTEXT, utf8mb4, inline index), times from `NOW(3)` in the
//! server's own session time zone.

use crate::sql::dialect::TableStatements;

/// MySQL's own statements (the shared-shape ones are in [`TableStatements`]).
pub struct MySqlStatements {
    pub create_table: String,
    /// `(queue, lease seconds, limit)`, locking the due rows it returns.
    pub claim_select: String,
    /// `… id IN ` marking the claimed rows delivered, ids appended inline.
    pub mark_delivered_head: String,
    insert_row: &'static str,
    insert_head: String,
    /// `(queue, body, headers, delay µs)`.
    pub insert_one: String,
    pub delete_head: String,
    /// `(id)`.
    pub redeliver_delete: String,
    pub release_head: String,
}

impl MySqlStatements {
    /// `INSERT … VALUES (…), (…)` for `rows` messages, four binds each.
    pub fn insert(&self, rows: usize) -> String {
        let mut sql =
            String::with_capacity(self.insert_head.len() + rows * (self.insert_row.len() + 2));
        sql.push_str(&self.insert_head);
        for i in 0..rows {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(self.insert_row);
        }
        sql
    }
}

pub fn statements(t: &str) -> (TableStatements, MySqlStatements) {
    let claimable = "queue_name = ? AND available_at <= NOW(3) \
         AND (delivered_at IS NULL OR delivered_at < NOW(3) - INTERVAL ? SECOND)";
    let create_table = format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,\n  body LONGTEXT NOT NULL,\n  headers LONGTEXT NOT NULL,\n  queue_name VARCHAR(190) NOT NULL,\n  created_at DATETIME(3) NOT NULL,\n  available_at DATETIME(3) NOT NULL,\n  delivered_at DATETIME(3) NULL,\n  INDEX {t}_claim_idx (queue_name, available_at, delivered_at, id)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci"
    );
    let shared = TableStatements {
        setup: create_table.clone(),
        keep_head: format!(
            "UPDATE {t} SET delivered_at = NOW(3) WHERE delivered_at IS NOT NULL AND id IN "
        ),
        // A row becomes claimable at its available_at, or, while claimed, when its claim's
        // lease runs out. The lease is bound once, after the queue name, as every dialect's
        // next_due takes them: the derived table `p` makes it a column the CASE can reuse.
        next_due: format!(
            "SELECT TIMESTAMPDIFF(MICROSECOND, NOW(3), MIN(CASE \
               WHEN m.delivered_at IS NULL OR m.delivered_at < NOW(3) - INTERVAL p.lease SECOND THEN m.available_at \
               ELSE GREATEST(m.available_at, m.delivered_at + INTERVAL p.lease SECOND) END)) / 1000e0 AS wait_ms \
             FROM (SELECT available_at, delivered_at FROM {t} WHERE queue_name = ?) AS m \
             CROSS JOIN (SELECT ? AS lease) AS p"
        ),
        list: format!(
            "SELECT CAST(id AS CHAR) AS id, body, headers FROM {t} WHERE queue_name = ? ORDER BY {t}.available_at, {t}.id LIMIT ?"
        ),
        find: format!("SELECT CAST(id AS CHAR) AS id, body, headers FROM {t} WHERE id = ?"),
        count: format!("SELECT COUNT(*) AS count FROM {t} WHERE {claimable}"),
    };
    let own = MySqlStatements {
        create_table,
        claim_select: format!(
            "SELECT CAST(id AS CHAR) AS id, body, headers FROM {t} WHERE {claimable} \
             ORDER BY {t}.available_at, {t}.delivered_at, {t}.id LIMIT ? FOR UPDATE SKIP LOCKED"
        ),
        mark_delivered_head: format!("UPDATE {t} SET delivered_at = NOW(3) WHERE id IN "),
        insert_row: "(?, ?, ?, NOW(3), NOW(3) + INTERVAL ? MICROSECOND)",
        insert_head: format!(
            "INSERT INTO {t} (queue_name, body, headers, created_at, available_at) VALUES "
        ),
        insert_one: format!(
            "INSERT INTO {t} (queue_name, body, headers, created_at, available_at) VALUES (?, ?, ?, NOW(3), NOW(3) + INTERVAL ? MICROSECOND)"
        ),
        delete_head: format!("DELETE FROM {t} WHERE id IN "),
        redeliver_delete: format!("DELETE FROM {t} WHERE id = ?"),
        release_head: format!("UPDATE {t} SET delivered_at = NULL WHERE id IN "),
    };
    (shared, own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddl_is_upstreams() {
        let (_, sql) = statements("messenger_messages");
        assert!(sql.create_table.starts_with("CREATE TABLE IF NOT EXISTS messenger_messages (\n  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,"));
        assert!(sql
            .create_table
            .contains("created_at DATETIME(3) NOT NULL,\n"));
        assert!(sql.create_table.contains(
            "INDEX messenger_messages_claim_idx (queue_name, available_at, delivered_at, id)"
        ));
        assert!(sql
            .create_table
            .ends_with(") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci"));
        assert!(sql.claim_select.contains("FOR UPDATE SKIP LOCKED"));
    }

    #[test]
    fn multi_row_insert_has_one_group_per_row() {
        let (_, sql) = statements("t");
        let three = sql.insert(3);
        assert_eq!(three.matches("NOW(3) + INTERVAL ? MICROSECOND").count(), 3);
        assert_eq!(three.matches('?').count(), 12);
    }
}
