//! The shared table's expected shape, as each dialect's setup creates it (see the DDL in
//! `crate::engines::sql::{postgres,mysql,sqlite}::statements`), and the judgement of a table read back
//! from the catalog against it: each drift named (missing column, wrong type, nullability,
//! missing or different claim index). No I/O here.

use super::checks::{Report, Status};
use crate::support::dsn::Dialect;

/// A column as the catalog describes it, its type already in the dialect's normal form
/// (lowercase; integer display widths dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: String,
    pub nullable: bool,
    /// Filled in by the database on insert (identity, serial default, AUTO_INCREMENT, rowid).
    pub generated: bool,
}

struct Expected {
    name: &'static str,
    ty: &'static str,
    nullable: bool,
    generated: bool,
}

const fn col(name: &'static str, ty: &'static str, nullable: bool) -> Expected {
    Expected {
        name,
        ty,
        nullable,
        generated: false,
    }
}

const fn id(ty: &'static str) -> Expected {
    Expected {
        name: "id",
        ty,
        nullable: false,
        generated: true,
    }
}

/// The seven columns setup creates, in a dialect's types: the id's, the body's and headers',
/// the queue name's and the three times'.
const fn table(
    id_ty: &'static str,
    text: &'static str,
    name: &'static str,
    time: &'static str,
) -> [Expected; 7] {
    [
        id(id_ty),
        col("body", text, false),
        col("headers", text, false),
        col("queue_name", name, false),
        col("created_at", time, false),
        col("available_at", time, false),
        col("delivered_at", time, true),
    ]
}

const POSTGRES: [Expected; 7] = table(
    "bigint",
    "text",
    "character varying(190)",
    "timestamp(3) with time zone",
);
const MYSQL: [Expected; 7] = table("bigint unsigned", "longtext", "varchar(190)", "datetime(3)");
const SQLITE: [Expected; 7] = table("integer", "text", "varchar(190)", "text");

/// The claim index's columns, in order (every dialect).
pub const INDEX_COLUMNS: [&str; 4] = ["queue_name", "available_at", "delivered_at", "id"];

fn expected(dialect: Dialect) -> &'static [Expected] {
    match dialect {
        Dialect::Postgres => &POSTGRES,
        Dialect::MySql => &MYSQL,
        Dialect::Sqlite => &SQLITE,
    }
}

/// A type without its size/precision and signedness: `timestamp(3) with time zone` →
/// `timestamp with time zone`, `bigint unsigned` → `bigint`.
fn base_type(ty: &str) -> String {
    let mut out = String::with_capacity(ty.len());
    let mut depth = 0usize;
    for c in ty.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace()
        .filter(|word| *word != "unsigned")
        .collect::<Vec<_>>()
        .join(" ")
}

fn nullability(nullable: bool) -> &'static str {
    if nullable {
        "NULL"
    } else {
        "NOT NULL"
    }
}

/// Judges the table's columns: one "columns" line naming every drift. A missing column, a
/// different base type, a wrong nullability or an id the database does not fill in fail (the
/// transport's statements would); a different size or precision and extra columns warn.
pub fn judge_columns(report: &mut Report, dialect: Dialect, table: &str, found: &[Column]) {
    let mut fails = Vec::new();
    let mut warns = Vec::new();
    for want in expected(dialect) {
        let Some(have) = found.iter().find(|c| c.name == want.name) else {
            fails.push(format!("missing column {}", want.name));
            continue;
        };
        if have.ty != want.ty {
            let line = format!(
                "column {} has type {}, expected {}",
                want.name, have.ty, want.ty
            );
            if base_type(&have.ty) == base_type(want.ty) {
                warns.push(line);
            } else {
                fails.push(line);
            }
        }
        if have.nullable != want.nullable {
            fails.push(format!(
                "column {} is {}, expected {}",
                want.name,
                nullability(have.nullable),
                nullability(want.nullable)
            ));
        }
        if want.generated && !have.generated {
            fails.push(format!(
                "column {} is not filled in by the database (no identity, default or auto-increment)",
                want.name
            ));
        }
    }
    for extra in found
        .iter()
        .filter(|c| expected(dialect).iter().all(|e| e.name != c.name))
    {
        warns.push(format!("extra column {}", extra.name));
    }
    let (status, detail) = if !fails.is_empty() {
        fails.extend(warns);
        (Status::Fail, fails.join("; "))
    } else if !warns.is_empty() {
        (Status::Warn, warns.join("; "))
    } else {
        (
            Status::Ok,
            format!(
                "{table}: {} columns as the transport creates them",
                found.len()
            ),
        )
    };
    report.push("columns", status, detail);
}

/// Judges the table's indexes (name → columns in order) against the claim index
/// `<table>_claim_idx (queue_name, available_at, delivered_at, id)`: missing, or made of other
/// columns, fails (claims would scan and sort the table); the right columns under another
/// name warn.
pub fn judge_index(report: &mut Report, table: &str, indexes: &[(String, Vec<String>)]) {
    let name = format!("{table}_claim_idx");
    let wanted = INDEX_COLUMNS.join(", ");
    let matches = |cols: &Vec<String>| cols.iter().map(String::as_str).eq(INDEX_COLUMNS);
    match indexes.iter().find(|(n, _)| *n == name) {
        Some((_, cols)) if matches(cols) => report.pass("claim index", format!("{name} ({wanted})")),
        Some((_, cols)) => report.fail(
            "claim index",
            format!("{name} is on ({}), expected ({wanted})", cols.join(", ")),
        ),
        None => match indexes.iter().find(|(_, cols)| matches(cols)) {
            Some((other, _)) => report.warn(
                "claim index",
                format!("no {name}, but {other} has its columns ({wanted})"),
            ),
            None => report.fail(
                "claim index",
                format!("missing index {name} ({wanted}): claims scan the table; run the transport's setup()"),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnostics::checks::Status;

    fn pg_table() -> Vec<Column> {
        POSTGRES
            .iter()
            .map(|e| Column {
                name: e.name.to_owned(),
                ty: e.ty.to_owned(),
                nullable: e.nullable,
                generated: e.generated,
            })
            .collect()
    }

    fn judged(found: &[Column]) -> (Status, String) {
        let mut report = Report::default();
        judge_columns(&mut report, Dialect::Postgres, "t", found);
        let check = report.checks.remove(0);
        (check.status, check.detail)
    }

    #[test]
    fn the_transports_own_table_passes() {
        assert_eq!(judged(&pg_table()).0, Status::Ok);
    }

    #[test]
    fn each_drift_is_named() {
        let mut table = pg_table();
        table.retain(|c| c.name != "headers");
        table[0].generated = false;
        table[4].ty = "text".to_owned(); // available_at
        table[5].nullable = false; // delivered_at
        table.push(Column {
            name: "priority".to_owned(),
            ty: "integer".to_owned(),
            nullable: true,
            generated: false,
        });
        let (status, detail) = judged(&table);
        assert_eq!(status, Status::Fail);
        for part in [
            "missing column headers",
            "column available_at has type text, expected timestamp(3) with time zone",
            "column delivered_at is NOT NULL, expected NULL",
            "column id is not filled in",
            "extra column priority",
        ] {
            assert!(detail.contains(part), "{part} in {detail}");
        }
    }

    #[test]
    fn a_different_precision_only_warns() {
        let mut table = pg_table();
        table[3].ty = "character varying(255)".to_owned();
        let (status, detail) = judged(&table);
        assert_eq!(status, Status::Warn);
        assert!(detail.contains("queue_name"), "{detail}");
        assert_eq!(base_type("bigint unsigned"), "bigint");
        assert_eq!(
            base_type("timestamp(3) with time zone"),
            "timestamp with time zone"
        );
    }

    #[test]
    fn the_claim_index_is_found_or_named_missing() {
        let cols: Vec<String> = INDEX_COLUMNS.iter().map(|c| (*c).to_owned()).collect();
        let cases = [
            (vec![("t_claim_idx".to_owned(), cols.clone())], Status::Ok),
            (vec![("other".to_owned(), cols.clone())], Status::Warn),
            (
                vec![("t_claim_idx".to_owned(), cols[..2].to_vec())],
                Status::Fail,
            ),
            (
                vec![("t_pkey".to_owned(), vec!["id".to_owned()])],
                Status::Fail,
            ),
        ];
        for (indexes, status) in cases {
            let mut report = Report::default();
            judge_index(&mut report, "t", &indexes);
            assert_eq!(report.checks[0].status, status, "{indexes:?}");
        }
        let mut report = Report::default();
        judge_index(&mut report, "t", &[]);
        assert!(report.checks[0]
            .detail
            .contains("missing index t_claim_idx"));
    }
}
