//! `doctor` for the SQL dialects, one file each (`postgres`, `mysql`, `sqlite`) over the
//! steps they share (`steps`): reachability, server version, clock, the shared table's
//! columns and claim index against what setup creates, and each dialect's own needs
//! (PostgreSQL: SKIP LOCKED and a LISTEN/NOTIFY round trip; MySQL/MariaDB: SKIP LOCKED and
//! the isolation level the transport's connections run at; SQLite: the file and its journal
//! mode). Every statement is bounded; nothing is created or changed (the NOTIFY goes to a
//! channel of the doctor's own).

use super::checks::Report;
use crate::support::dsn::Dialect;
use steps::SqlTarget;

/// Runs one bounded statement on a connection, its error in the dialect's words.
macro_rules! run {
    ($d:ty, $target:expr, $what:expr, $fut:expr) => {
        crate::diagnostics::connect::checked::<$d, _>($target.dsn, $what, $fut)
    };
}

mod mysql;
mod postgres;
mod sqlite;
pub mod steps;

pub async fn doctor(report: &mut Report, target: &SqlTarget<'_>) {
    if let Err(err) = crate::support::ident::validate_table_name(target.table) {
        report.fail("table", err.message);
        return;
    }
    match target.dsn.dialect {
        Dialect::Postgres => postgres::doctor(report, target).await,
        Dialect::MySql => mysql::doctor(report, target).await,
        Dialect::Sqlite => sqlite::doctor(report, target).await,
    }
}
