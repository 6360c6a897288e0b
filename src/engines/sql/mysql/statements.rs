//! MySQL/MariaDB's SQL for one table, built once (the table name is allowlisted before it
//! gets here): upstream's DDL (LONGTEXT, utf8mb4, inline index), times from `NOW(3)` in the
//! server's own session time zone.

use super::name_column::NameColumn;
use crate::engines::sql::connector::TableStatements;

/// A claim's token: `delivered_at` as microseconds since `1970-01-01` in the session's own
/// time zone (plain DATETIME arithmetic: no zone conversion, exact).
pub const TOKEN_OF: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', delivered_at)";
/// The token a claim made now gets; [`delivered_at_of`] turns it back into the value to store.
const NOW_TOKEN: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', NOW(3))";

/// The `delivered_at` value of token `token` (an integer: inlined safely).
pub fn delivered_at_of(token: i64) -> String {
    format!("'1970-01-01' + INTERVAL {token} MICROSECOND")
}

/// The `delivered_at` value of a bound token (as [`delivered_at_of`] of an inlined one).
const DELIVERED_AT_OF_BOUND: &str = "'1970-01-01' + INTERVAL ? MICROSECOND";

/// MySQL's own statements (the shared-shape ones are in [`TableStatements`]).
pub struct MySqlStatements {
    pub create_table: String,
    /// The claim's SELECT up to the queue's name (see [`MySqlStatements::begin_claim`]).
    claim_head: String,
    /// … and from the name to the lease.
    claim_lease: String,
    /// … and from the lease to the limit.
    claim_order: String,
    /// `UPDATE … SET delivered_at = `: then the token's value, `WHERE id IN `, ids (see
    /// [`MySqlStatements::mark_delivered`]).
    pub mark_delivered_head: String,
    /// `SELECT … AS token`: the token of a claim made now.
    pub now_token: String,
    /// The table's name (allowlisted).
    table: String,
    /// `SELECT (id, token) … WHERE ` the rows a renewal renewed.
    pub renewed_head: String,
    insert_row: &'static str,
    insert_head: String,
    /// `(queue, body, headers, delay µs)`.
    pub insert_one: String,
    /// `(queue, body, headers, token, token, lateness µs)`: one due message stored claimed
    /// with `token`, if it lies between the server's `NOW(3)` and `lateness` after it (else
    /// no row).
    pub claimed_insert: String,
    /// `(id, token, token)`: `token` NULL deletes by id.
    pub redeliver_delete: String,
    pub release_head: String,
}

impl MySqlStatements {
    /// `BEGIN` and the SELECT locking up to `limit` due rows of `queue` (lease
    /// `lease_seconds`) → `(id, body, headers, token)`, `token` the claim's, from the server
    /// clock. As text with its values inlined, so that the `BEGIN` travels with it: the binary
    /// protocol takes one statement a round trip, and a claim is then two (this, and the
    /// UPDATE with the COMMIT) rather than three.
    pub fn begin_claim(&self, queue: &str, lease_seconds: f64, limit: u32) -> String {
        format!(
            "BEGIN; {}{}{}{lease_seconds}{}{limit} FOR UPDATE SKIP LOCKED",
            self.claim_head,
            utf8mb4_literal(queue),
            self.claim_lease,
            self.claim_order
        )
    }

    /// Marks claimed rows `ids` delivered by the claim of `token`.
    pub fn mark_delivered(&self, token: i64, ids: &[i64]) -> String {
        format!(
            "{}{} WHERE id IN {}",
            self.mark_delivered_head,
            delivered_at_of(token),
            crate::engines::sql::ids::id_list(ids)
        )
    }

    /// Renews, to the claim of `token`, the rows of `condition` still held.
    pub fn renew(&self, token: i64, condition: &str) -> String {
        format!(
            "UPDATE {} SET delivered_at = {} WHERE delivered_at IS NOT NULL AND {condition}",
            self.table,
            delivered_at_of(token)
        )
    }

    /// Releases the rows of `queue` a claimed insert stamped with `nonce` modulo `span_ms`
    /// may have stored in the last `window_us` µs, but for this process's claims `spared`:
    /// rows made available in that time and claimed within `lateness_us` of their creation.
    pub fn release_stamped(
        &self,
        queue: &str,
        (nonce, span_ms): (i64, i64),
        window_us: i64,
        lateness_us: i64,
        spared: &[i64],
    ) -> String {
        let spared = if spared.is_empty() {
            String::new()
        } else {
            format!(
                " AND {TOKEN_OF} NOT IN {}",
                crate::engines::sql::ids::id_list(spared)
            )
        };
        format!(
            "UPDATE {t} SET delivered_at = NULL WHERE queue_name = {queue} \
             AND available_at >= NOW(3) - INTERVAL {window_us} MICROSECOND \
             AND delivered_at IS NOT NULL AND delivered_at <= created_at + INTERVAL {lateness_us} MICROSECOND \
             AND MOD({TOKEN_OF} DIV 1000, {span_ms}) = {nonce}{spared}",
            t = self.table,
            queue = utf8mb4_literal(queue),
        )
    }

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

/// `text` as a utf8mb4 string literal in hexadecimal, which reads the same whatever the
/// session's `sql_mode` (a backslash escapes in a quoted literal unless NO_BACKSLASH_ESCAPES).
/// Like a bound string it is coercible: compared with a column, the column's collation wins
/// and the claim index serves.
fn utf8mb4_literal(text: &str) -> String {
    use std::fmt::Write;
    let mut literal = String::with_capacity(12 + 2 * text.len());
    literal.push_str("_utf8mb4 X'");
    for byte in text.bytes() {
        let _ = write!(literal, "{byte:02X}");
    }
    literal.push('\'');
    literal
}

/// The shared poll of table `t` (see `crate::engines::sql::table_poller`): for each queue its
/// one parameter names (a JSON array of names) that has rows, ms to its earliest unclaimed row
/// and to its earliest claim. The names are compared as `column` (the table's `queue_name`)
/// compares them, so that each is a lookup in the claim index (see `super::name_column`), and
/// each row of the answer is one bound name, as it was given: under a case-insensitive
/// collation, `Orders` and `orders` are two answers about the same rows. The text is the same
/// for any set of queues, so it is prepared once per connection.
pub fn due_by_queue(t: &str, column: &NameColumn) -> String {
    let name = match column {
        NameColumn::Text { charset, collation } => {
            format!("CONVERT(n.name USING {charset}) COLLATE {collation}")
        }
        NameColumn::Binary => "n.name".to_owned(),
    };
    format!(
        "SELECT MIN(n.name) AS queue_name, \
           TIMESTAMPDIFF(MICROSECOND, NOW(3), MIN(CASE WHEN m.delivered_at IS NULL THEN m.available_at END)) / 1000e0 AS free_ms, \
           TIMESTAMPDIFF(MICROSECOND, NOW(3), MIN(CASE WHEN m.delivered_at IS NOT NULL THEN GREATEST(m.available_at, m.delivered_at) END)) / 1000e0 AS held_ms \
         FROM JSON_TABLE(?, '$[*]' COLUMNS (idx FOR ORDINALITY, name VARCHAR(1000) CHARACTER SET utf8mb4 PATH '$')) AS n \
         JOIN {t} AS m ON m.queue_name = {name} \
         GROUP BY n.idx"
    )
}

pub fn statements(t: &str) -> (TableStatements, MySqlStatements) {
    let claimable = "queue_name = ? AND available_at <= NOW(3) \
         AND (delivered_at IS NULL OR delivered_at < NOW(3) - INTERVAL ? SECOND)";
    // The claim inlines the two values (see `begin_claim`).
    let claimable_parts: Vec<&str> = claimable.split('?').collect();
    let create_table = format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n  id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY,\n  body LONGTEXT NOT NULL,\n  headers LONGTEXT NOT NULL,\n  queue_name VARCHAR(190) NOT NULL,\n  created_at DATETIME(3) NOT NULL,\n  available_at DATETIME(3) NOT NULL,\n  delivered_at DATETIME(3) NULL,\n  INDEX {t}_claim_idx (queue_name, available_at, delivered_at, id)\n) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci"
    );
    let shared = TableStatements {
        setup: create_table.clone(),
        // CREATE TABLE IF NOT EXISTS asks for the CREATE privilege before it looks for the
        // table: an app account granted only the use of a table a migration made would fail
        // its auto-setup. The catalog shows an account the tables it may use.
        setup_done: Some(format!(
            "SELECT COUNT(*) AS count FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{t}' AND INDEX_NAME = '{t}_claim_idx'"
        )),
        delete_head: format!("DELETE FROM {t} WHERE "),
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
        claim_head: format!(
            "SELECT CAST(id AS CHAR) AS id, body, headers, {NOW_TOKEN} AS token FROM {t} WHERE {}",
            claimable_parts[0]
        ),
        claim_lease: claimable_parts[1].to_owned(),
        claim_order: format!(
            "{} ORDER BY {t}.available_at, {t}.delivered_at, {t}.id LIMIT ",
            claimable_parts[2]
        ),
        mark_delivered_head: format!("UPDATE {t} SET delivered_at = "),
        now_token: format!("SELECT {NOW_TOKEN} AS token"),
        table: t.to_owned(),
        renewed_head: format!("SELECT CAST(id AS CHAR) AS id, {TOKEN_OF} AS token FROM {t} WHERE "),
        insert_row: "(?, ?, ?, NOW(3), NOW(3) + INTERVAL ? MICROSECOND)",
        insert_head: format!(
            "INSERT INTO {t} (queue_name, body, headers, created_at, available_at) VALUES "
        ),
        insert_one: format!(
            "INSERT INTO {t} (queue_name, body, headers, created_at, available_at) VALUES (?, ?, ?, NOW(3), NOW(3) + INTERVAL ? MICROSECOND)"
        ),
        claimed_insert: format!(
            "INSERT INTO {t} (queue_name, body, headers, created_at, available_at, delivered_at) \
             SELECT ?, ?, ?, NOW(3), NOW(3), {DELIVERED_AT_OF_BOUND} FROM DUAL WHERE ? BETWEEN {NOW_TOKEN} AND {NOW_TOKEN} + ?"
        ),
        redeliver_delete: format!(
            "DELETE FROM {t} WHERE id = ? AND (? IS NULL OR {TOKEN_OF} = ?)"
        ),
        release_head: format!("UPDATE {t} SET delivered_at = NULL WHERE "),
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
    }

    #[test]
    fn a_claim_begins_its_transaction_and_locks_what_the_shared_condition_selects() {
        let (shared, sql) = statements("t");
        let claim = sql.begin_claim("it's", 3600.5, 100);
        assert!(claim.starts_with("BEGIN; SELECT "), "{claim}");
        assert!(
            claim.ends_with(" LIMIT 100 FOR UPDATE SKIP LOCKED"),
            "{claim}"
        );
        // The claimable condition every other statement binds, with the values in place.
        let bound = shared
            .count
            .replacen('?', "_utf8mb4 X'69742773'", 1)
            .replacen('?', "3600.5", 1);
        let condition = bound.split(" WHERE ").nth(1).unwrap_or_default();
        assert!(claim.contains(condition), "{claim}\n{condition}");
    }

    #[test]
    fn names_become_hexadecimal_literals_with_nothing_to_escape() {
        assert_eq!(utf8mb4_literal("default"), "_utf8mb4 X'64656661756C74'");
        assert_eq!(utf8mb4_literal("a'\\"), "_utf8mb4 X'61275C'");
        assert_eq!(utf8mb4_literal("é"), "_utf8mb4 X'C3A9'");
    }

    #[test]
    fn multi_row_insert_has_one_group_per_row() {
        let (_, sql) = statements("t");
        let three = sql.insert(3);
        assert_eq!(three.matches("NOW(3) + INTERVAL ? MICROSECOND").count(), 3);
        assert_eq!(three.matches('?').count(), 12);
    }
}
