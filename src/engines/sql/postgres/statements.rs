//! PostgreSQL's SQL for one table, built once (the table name is allowlisted before it gets
//! here). The DDL is upstream's byte for byte; NOTIFY (channel = table, payload = queue) is in
//! the statements only when `useNotify` is on.

use crate::engines::sql::claim_doubt::RENEWAL_GRAIN_MS;
use crate::engines::sql::connector::TableStatements;

/// A claim's token: `delivered_at` in whole microseconds (PostgreSQL's own resolution, so
/// exact whatever the column's precision).
pub const TOKEN_OF: &str = "(extract(epoch FROM delivered_at) * 1000000)::bigint";

/// Makes the statement's transaction commit without waiting for its WAL flush (claims and
/// renewals: one lost in a crash only leaves its rows at their previous lease or claimable).
const RELAXED_COMMIT: &str = "set_config('synchronous_commit', 'off', true)";

/// `(channels[])` → each channel written as the server writes an identifier: bare where it
/// needs no quoting, so the listener's `pg_stat_activity.query` reads `LISTEN <table>` as
/// upstream's does, and quoted where the name is a keyword (a bare one would not parse). The
/// server's own keyword list decides, not a copy of it.
pub const WRITTEN_CHANNELS: &str =
    "SELECT quote_ident(c) FROM unnest($1::text[]) WITH ORDINALITY AS t(c, n) ORDER BY n";

/// The LISTEN of one channel as [`WRITTEN_CHANNELS`] wrote it: upstream's text, no semicolon.
pub fn listen(written_channel: &str) -> String {
    format!("LISTEN {written_channel}")
}

/// PostgreSQL's own statements (the shared-shape ones are in [`TableStatements`]).
pub struct PgStatements {
    pub create_table: String,
    pub create_index: String,
    /// `(queue, bodies[], headers[], delays_ms[], channel)` → ids, one NOTIFY per statement.
    pub insert: String,
    /// `(queue, lease seconds, limit, nonce, span ms)` → claimed `(id, body, headers, token)`,
    /// in claim order; the claim's stamp is the first millisecond ≥ `now()` whose residue
    /// modulo the span is the nonce (see `claim_doubt`).
    pub claim: String,
    /// `(queue, body, headers, nonce, span ms)` → `(id, token)`: one due message stored claimed,
    /// stamped as a claim with that nonce stamps (see `claimed_insert`).
    pub claimed_insert: String,
    /// `(channel, queue, nonce, window seconds, span ms, spared tokens[])`: releases the rows a
    /// claim with that nonce can have stamped in the last `window` seconds, but for the claims
    /// whose tokens are spared.
    pub release_stamped: String,
    /// `(id, body, headers, delay_ms, channel, token)` → the copy's id, or no row if `id` was
    /// gone or (with a token) claimed anew.
    pub redeliver: String,
    /// `UPDATE … WHERE delivered_at IS NOT NULL AND `, a held-row condition appended; stamps
    /// the first whole multiple of the renewal grain at or after `now()` (see `claim_doubt`).
    pub renew_head: String,
    /// `release_head`, a held-row condition, `release_tail`; binds `(channel)`.
    pub release_head: String,
    pub release_tail: &'static str,
}

/// The first millisecond at or after `now()` whose residue modulo `span` is `residue` (both
/// SQL integer expressions), as a timestamp. Integer milliseconds throughout, so the stamp is
/// exact in the column's TIMESTAMPTZ(3).
fn stamp(residue: &str, span: &str) -> String {
    format!(
        "to_timestamp(((ceil((floor(extract(epoch FROM now()) * 1000) - {residue}) / {span}) * {span} + {residue}) / 1000.0)::float8)"
    )
}

/// The shared poll of a table's idle consumers that NOTIFY does not wake (`useNotify: false`,
/// or the LISTEN connection down): for each queue its one parameter names (a JSON array of
/// names) that has rows, ms until its next free row is due and until the earliest claimed one
/// may lapse (before its lease is added). The text is the same for any set of queues, so it
/// is prepared once per connection (through a transaction pooler, as every bound statement,
/// unnamed in a transaction of its own).
pub fn due_by_queue(t: &str) -> String {
    format!(
        "SELECT queue_name, \
           (extract(epoch FROM (min(CASE WHEN delivered_at IS NULL THEN available_at END) - now())) * 1000)::float8 AS free_ms, \
           (extract(epoch FROM (min(CASE WHEN delivered_at IS NOT NULL THEN greatest(available_at, delivered_at) END) - now())) * 1000)::float8 AS held_ms \
         FROM {t} WHERE queue_name = ANY (ARRAY(SELECT json_array_elements_text($1::text::json))) GROUP BY queue_name"
    )
}

pub fn statements(t: &str, notify: bool) -> (TableStatements, PgStatements) {
    // Predicate and order shared with upstream workers (mixed fleets): due, and either
    // never delivered or delivered longer ago than the redelivery timeout.
    let claimable = "queue_name = $1 AND available_at <= now() \
         AND (delivered_at IS NULL OR delivered_at < now() - make_interval(secs => $2::float8))";
    let inserted = format!(
        "WITH ins AS ( \
           INSERT INTO {t} (queue_name, body, headers, available_at) \
           SELECT $1::text, m.body, m.headers, now() + make_interval(secs => m.delay_ms / 1000) \
           FROM unnest($2::text[], $3::text[], $4::float8[]) WITH ORDINALITY AS m(body, headers, delay_ms, ord) \
           ORDER BY m.ord RETURNING id \
         )"
    );
    let insert = if notify {
        format!(
            "{inserted}, notified AS MATERIALIZED (SELECT pg_notify($5::text, $1::text)) \
             SELECT ins.id::text AS id FROM ins CROSS JOIN notified ORDER BY ins.id"
        )
    } else {
        format!("{inserted} SELECT ins.id::text AS id FROM ins ORDER BY ins.id")
    };
    let redeliver_tail = if notify {
        "SELECT ins.id::text AS id FROM ins CROSS JOIN LATERAL (SELECT pg_notify($5::text, ins.queue_name)) AS n"
    } else {
        "SELECT ins.id::text AS id FROM ins WHERE $5::text IS NOT NULL"
    };
    let (release_head, release_tail) = if notify {
        (
            format!("WITH r AS (UPDATE {t} SET delivered_at = NULL WHERE "),
            " RETURNING queue_name) SELECT count(*) FROM (SELECT DISTINCT queue_name FROM r) AS q \
             CROSS JOIN LATERAL (SELECT pg_notify($1::text, q.queue_name)) AS n",
        )
    } else {
        (
            format!("UPDATE {t} SET delivered_at = NULL WHERE "),
            " AND $1::text IS NOT NULL",
        )
    };
    let claim_stamp = stamp("$4::bigint", "$5::bigint");
    // Never a claim's residue, whatever either's lease: a lost claim's release cannot take a
    // live renewal.
    let renewal_stamp = stamp("0", &RENEWAL_GRAIN_MS.to_string());
    let stamped = format!(
        "queue_name = $2::text AND delivered_at >= now() - make_interval(secs => $4::float8) \
         AND delivered_at <= now() + make_interval(secs => $5::float8 / 1000 + 1) \
         AND mod({TOKEN_OF} / 1000, $5::bigint) = $3::bigint AND NOT ({TOKEN_OF} = ANY($6::bigint[]))"
    );
    let release_stamped = format!("{release_head}{stamped}{release_tail}");
    let create_table = format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n  body TEXT NOT NULL,\n  headers TEXT NOT NULL,\n  queue_name VARCHAR(190) NOT NULL,\n  created_at TIMESTAMPTZ(3) NOT NULL DEFAULT now(),\n  available_at TIMESTAMPTZ(3) NOT NULL,\n  delivered_at TIMESTAMPTZ(3)\n)"
    );
    let create_index = format!(
        "CREATE INDEX IF NOT EXISTS {t}_claim_idx ON {t} (queue_name, available_at, delivered_at, id)"
    );
    let shared = TableStatements {
        // Concurrent CREATE … IF NOT EXISTS can still collide in the catalog: one process at
        // a time per table. A multi-statement simple query is one implicit transaction, so
        // the transaction-scoped lock holds until both are done. (The name is allowlisted.)
        setup: format!(
            "SELECT pg_advisory_xact_lock(hashtext('nestjs-messenger:{t}')); {create_table}; {create_index}"
        ),
        // CREATE INDEX IF NOT EXISTS takes its table lock before it looks for the index: on a
        // table that has it, it still waits for every open transaction that wrote to the table
        // (an outbox send inside a long business transaction) and holds up every send, claim
        // and ack queued behind it. So the catalog is asked first, which locks nothing: the
        // table this name resolves to, with the index beside it in its schema.
        setup_done: Some(format!(
            "SELECT count(*) AS count FROM pg_class t JOIN pg_class i ON i.relnamespace = t.relnamespace \
             WHERE t.oid = to_regclass('{t}') AND i.relname = '{t}_claim_idx'"
        )),
        delete_head: format!("DELETE FROM {t} WHERE "),
        // A row becomes claimable at its available_at, or, while claimed, when its claim's
        // lease runs out (so an idle consumer takes over a crashed one's rows at the lease).
        next_due: format!(
            "SELECT (extract(epoch FROM (min(CASE \
               WHEN delivered_at IS NULL OR delivered_at < now() - make_interval(secs => $2::float8) THEN available_at \
               ELSE greatest(available_at, delivered_at + make_interval(secs => $2::float8)) END) - now())) * 1000)::float8 AS wait_ms \
             FROM {t} WHERE queue_name = $1"
        ),
        list: format!(
            "SELECT id::text AS id, body, headers FROM {t} WHERE queue_name = $1 ORDER BY {t}.available_at, {t}.id LIMIT $2"
        ),
        find: format!("SELECT id::text AS id, body, headers FROM {t} WHERE id = $1"),
        count: format!("SELECT count(*) AS count FROM {t} WHERE {claimable}"),
    };
    let own = PgStatements {
        create_table,
        create_index,
        insert,
        // The claim commits without waiting for its WAL flush (synchronous_commit off for
        // this transaction only): a claim lost in a server crash only makes its rows
        // claimable again (its settles are fenced out), and an idle consumer's wake-up is
        // then one flush shorter. Sends, acks and rejects keep the server's setting.
        claim: format!(
            "WITH relaxed AS (SELECT {RELAXED_COMMIT} AS setting), \
             due AS ( \
               SELECT id FROM {t} WHERE {claimable} \
               ORDER BY available_at, delivered_at, id LIMIT $3 FOR UPDATE SKIP LOCKED \
             ), claimed AS ( \
               UPDATE {t} AS m SET delivered_at = {claim_stamp} FROM due WHERE m.id = due.id \
               RETURNING m.id, m.body, m.headers, m.available_at, {TOKEN_OF} AS token \
             ) SELECT claimed.id::text AS id, body, headers, token FROM claimed, relaxed ORDER BY claimed.available_at, claimed.id"
        ),
        // No NOTIFY: the row is claimed, so no consumer anywhere could take it.
        claimed_insert: format!(
            "INSERT INTO {t} (queue_name, body, headers, available_at, delivered_at) \
             VALUES ($1, $2, $3, now(), {claim_stamp}) RETURNING id::text AS id, {TOKEN_OF} AS token"
        ),
        redeliver: format!(
            "WITH original AS ( \
               DELETE FROM {t} WHERE id = $1 AND ($6::bigint IS NULL OR {TOKEN_OF} = $6::bigint) RETURNING queue_name \
             ), \
             ins AS ( \
               INSERT INTO {t} (queue_name, body, headers, available_at) \
               SELECT queue_name, $2::text, $3::text, now() + make_interval(secs => $4::float8 / 1000) \
               FROM original RETURNING id, queue_name \
             ) {redeliver_tail}"
        ),
        // Like the claim, a renewal does not wait for its WAL flush: one lost in a crash
        // leaves the claim at its previous lease, as the crash leaves every other claim, and
        // a renewal stuck behind a busy disk would let a live handler's message lapse.
        renew_head: format!(
            "UPDATE {t} SET delivered_at = {renewal_stamp} \
             FROM (SELECT {RELAXED_COMMIT}) AS relaxed \
             WHERE delivered_at IS NOT NULL AND "
        ),
        release_stamped,
        release_head,
        release_tail,
    };
    (shared, own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddl_is_upstream_byte_for_byte() {
        let (_, sql) = statements("messenger_messages", true);
        assert_eq!(
            sql.create_table,
            "CREATE TABLE IF NOT EXISTS messenger_messages (\n  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,\n  body TEXT NOT NULL,\n  headers TEXT NOT NULL,\n  queue_name VARCHAR(190) NOT NULL,\n  created_at TIMESTAMPTZ(3) NOT NULL DEFAULT now(),\n  available_at TIMESTAMPTZ(3) NOT NULL,\n  delivered_at TIMESTAMPTZ(3)\n)"
        );
        assert_eq!(
            sql.create_index,
            "CREATE INDEX IF NOT EXISTS messenger_messages_claim_idx ON messenger_messages (queue_name, available_at, delivered_at, id)"
        );
    }

    #[test]
    fn notify_is_only_in_the_notify_statements() {
        let (_, on) = statements("t", true);
        let (_, off) = statements("t", false);
        assert!(on.insert.contains("pg_notify") && on.redeliver.contains("pg_notify"));
        assert!(!off.insert.contains("pg_notify") && !off.redeliver.contains("pg_notify"));
        assert!(on.claim.contains("FOR UPDATE SKIP LOCKED"));
    }

    #[test]
    fn listen_is_upstreams_text() {
        assert_eq!(listen("messenger_messages"), "LISTEN messenger_messages");
        assert_eq!(listen("\"order\""), "LISTEN \"order\"");
    }

    #[test]
    fn renewals_stamp_a_whole_grain() {
        let (_, sql) = statements("t", false);
        assert!(
            sql.renew_head.starts_with(&format!(
                "UPDATE t SET delivered_at = {} ",
                stamp("0", "10")
            )),
            "{}",
            sql.renew_head
        );
        assert!(sql
            .renew_head
            .ends_with("WHERE delivered_at IS NOT NULL AND "));
    }
}
