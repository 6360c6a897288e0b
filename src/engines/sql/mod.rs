//! The SQL engine: one table queue ([`TableQueue`]) written once, generic over a dialect
//! ([`SqlDialect`]). Each dialect folder owns only what is its own: its statements and DDL,
//! its insert, claim and reject, its error classification and its server checks. The queue
//! logic above (`crate::queue`) talks to the table queue only through the `Engine` contract,
//! and the table queue branches on a dialect's [`DialectFacts`], never on its name.
//!
//! Adding a dialect: a folder implementing [`Connector`] and [`SqlDialect`], and one line in
//! [`open_engine`] and [`facts_of`] (its DSN schemes go in `crate::support::dsn`).
//!
//! The files import downwards only, in this order (each may use those below it):
//! - `table_queue`: the [`Engine`] over every dialect;
//! - `dialect`: the queue side of a dialect ([`SqlDialect`]), handed a `queue_context`;
//! - `queue_context`: one queue as a dialect sees it (target, [`QueueConfig`], statements);
//! - `target`: the connection target ([`Connector`] only), the pollers' `PollTarget`;
//! - `table_poller`, `connector`, `retry`: the shared polls, the connection side of a
//!   dialect, the retry policy;
//! - `driver`, `errors`, `ids`, `claim_doubt` (over `ids`), `kept_connection`: the bottom.
//!
//! A dialect folder implements both traits and may import any of these but `table_queue`.

mod claim_doubt;
mod connection_epoch;
mod connector;
mod dialect;
mod driver;
mod errors;
mod ids;
#[cfg(test)]
mod io_tests;
mod kept_connection;
mod queue_context;
mod retry;
mod table_poller;
mod table_queue;
mod target;

pub mod mysql;
pub mod outbox;
pub mod postgres;
pub mod sqlite;

pub use connector::{Connector, DialectFacts};
pub use dialect::SqlDialect;
pub use queue_context::QueueConfig;
pub use table_queue::TableQueue;

use crate::queue::engine::Engine;
use crate::support::dsn::{Dialect, SqlDsn};
use crate::support::error::Result;
use std::sync::Arc;

/// Opens (or joins) the shared connection target for a DSN and returns the queue's engine.
pub fn open_engine(dsn: &SqlDsn, config: QueueConfig) -> Result<Arc<dyn Engine>> {
    Ok(match dsn.dialect {
        Dialect::Postgres => Arc::new(TableQueue::<postgres::Postgres>::open(dsn, config)?),
        Dialect::MySql => Arc::new(TableQueue::<mysql::MySql>::open(dsn, config)?),
        Dialect::Sqlite => Arc::new(TableQueue::<sqlite::Sqlite>::open(dsn, config)?),
    })
}

/// What the layers above may know of a dialect.
pub fn facts_of(dialect: Dialect) -> DialectFacts {
    match dialect {
        Dialect::Postgres => postgres::Postgres::FACTS,
        Dialect::MySql => mysql::MySql::FACTS,
        Dialect::Sqlite => sqlite::Sqlite::FACTS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dialect_lists_by_the_numeric_id_and_claims_in_the_claim_index_order() {
        let (pg, pg_own) = postgres::Postgres::statements("t", true);
        let (my, my_own) = mysql::MySql::statements("t", false);
        let (lite, lite_own) = sqlite::Sqlite::statements("t", false);
        // Ordering by the text alias `id` would put "10" before "9".
        for list in [&pg.list, &my.list, &lite.list] {
            assert!(list.contains("ORDER BY t.available_at, t.id"), "{list}");
        }
        // The claim index's own order, so that no claim sorts the queue.
        let my_claim = my_own.begin_claim("q", 1.0, 10);
        for claim in [&pg_own.claim, &my_claim, &lite_own.claim] {
            assert!(
                claim
                    .replace("t.", "")
                    .contains("available_at, delivered_at, id LIMIT"),
                "{claim}"
            );
        }
    }
}
