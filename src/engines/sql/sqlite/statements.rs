//! SQLite's SQL for one table, built once (the table name is allowlisted before it gets
//! here). Same table and column names as the other dialects; times are UTC text
//! `YYYY-MM-DD HH:MM:SS.SSS` from SQLite's own clock (text of that shape sorts like time).

use crate::engines::sql::connector::TableStatements;

const NOW: &str = "strftime('%Y-%m-%d %H:%M:%f', 'now')";

/// A claim's token: `delivered_at` (millisecond text) as whole microseconds since the epoch.
pub const TOKEN_OF: &str =
    "CAST(round((julianday(delivered_at) - 2440587.5) * 86400000.0) AS INTEGER) * 1000";

/// SQLite's own statements (the shared-shape ones are in [`TableStatements`]).
pub struct SqliteStatements {
    pub create_table: String,
    pub create_index: String,
    /// `(queue, body, headers, delay_ms)`.
    pub insert: String,
    /// `(queue, lease seconds, limit)` → claimed `(id, body, headers, available_at, token)`.
    pub claim: String,
    /// `(id, token or NULL)`.
    pub redeliver_delete: String,
    pub release_head: String,
    /// `UPDATE … WHERE delivered_at IS NOT NULL AND `, a held-row condition appended.
    pub renew_head: String,
}

/// The shared poll of table `t` (see `crate::engines::sql::table_poller`): for each queue its
/// one parameter names (a JSON array of names) that has rows, ms to its earliest unclaimed row
/// and to its earliest claim. The text is the same for any set of queues, so it is prepared
/// once per connection.
pub fn due_by_queue(t: &str) -> String {
    format!(
        "SELECT queue_name, \
           (julianday(MIN(CASE WHEN delivered_at IS NULL THEN available_at END)) - julianday('now')) * 86400000.0 AS free_ms, \
           (julianday(MIN(CASE WHEN delivered_at IS NOT NULL THEN max(available_at, delivered_at) END)) - julianday('now')) * 86400000.0 AS held_ms \
         FROM {t} WHERE queue_name IN (SELECT value FROM json_each(?1)) GROUP BY queue_name"
    )
}

pub fn statements(t: &str) -> (TableStatements, SqliteStatements) {
    let expired = "strftime('%Y-%m-%d %H:%M:%f', 'now', printf('-%.3f seconds', ?2))";
    let claimable = format!(
        "queue_name = ?1 AND available_at <= {NOW} AND (delivered_at IS NULL OR delivered_at < {expired})"
    );
    let create_table = format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n  id INTEGER PRIMARY KEY AUTOINCREMENT,\n  body TEXT NOT NULL,\n  headers TEXT NOT NULL,\n  queue_name VARCHAR(190) NOT NULL,\n  created_at TEXT NOT NULL,\n  available_at TEXT NOT NULL,\n  delivered_at TEXT NULL\n)"
    );
    let create_index = format!(
        "CREATE INDEX IF NOT EXISTS {t}_claim_idx ON {t} (queue_name, available_at, delivered_at, id)"
    );
    let shared = TableStatements {
        setup: format!("{create_table}; {create_index}"),
        setup_done: None,
        delete_head: format!("DELETE FROM {t} WHERE "),
        // A row becomes claimable at its available_at, or, while claimed, when its claim's
        // lease runs out (so an idle consumer takes over a crashed one's rows at the lease).
        next_due: format!(
            "SELECT (julianday(MIN(CASE \
               WHEN delivered_at IS NULL OR delivered_at < {expired} THEN available_at \
               ELSE max(available_at, strftime('%Y-%m-%d %H:%M:%f', delivered_at, printf('+%.3f seconds', ?2))) END)) \
               - julianday('now')) * 86400000.0 AS wait_ms \
             FROM {t} WHERE queue_name = ?1"
        ),
        list: format!(
            "SELECT CAST(id AS TEXT) AS id, body, headers FROM {t} WHERE queue_name = ?1 ORDER BY {t}.available_at, {t}.id LIMIT ?2"
        ),
        find: format!("SELECT CAST(id AS TEXT) AS id, body, headers FROM {t} WHERE id = ?1"),
        count: format!("SELECT COUNT(*) AS count FROM {t} WHERE {claimable}"),
    };
    let own = SqliteStatements {
        create_table,
        create_index,
        insert: format!(
            "INSERT INTO {t} (queue_name, body, headers, created_at, available_at) VALUES \
             (?1, ?2, ?3, {NOW}, strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', ?4 / 1000.0)))"
        ),
        claim: format!(
            "UPDATE {t} SET delivered_at = {NOW} WHERE id IN ( \
               SELECT id FROM {t} WHERE {claimable} ORDER BY available_at, delivered_at, id LIMIT ?3 \
             ) RETURNING CAST(id AS TEXT) AS id, body, headers, available_at, {TOKEN_OF} AS token"
        ),
        redeliver_delete: format!(
            "DELETE FROM {t} WHERE id = ?1 AND (?2 IS NULL OR {TOKEN_OF} = ?2)"
        ),
        release_head: format!("UPDATE {t} SET delivered_at = NULL WHERE "),
        renew_head: format!(
            "UPDATE {t} SET delivered_at = {NOW} WHERE delivered_at IS NOT NULL AND "
        ),
    };
    (shared, own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_is_one_statement() {
        let (_, sql) = statements("t");
        assert!(sql.claim.starts_with("UPDATE t SET delivered_at"));
        assert!(sql.claim.contains("RETURNING"));
        assert!(sql
            .create_index
            .contains("t_claim_idx ON t (queue_name, available_at, delivered_at, id)"));
    }
}
