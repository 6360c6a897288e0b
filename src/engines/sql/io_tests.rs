//! The table queue against real servers, on every dialect: the shared PostgreSQL and MariaDB
//! (`POSTGRES_DSN`, `MYSQL_DSN`; the defaults are the servers `npm test` brings up) and a
//! SQLite file of its own. Each test works on a table of its own.

use super::{open_engine, QueueConfig};
use crate::queue::engine::{Engine, NewMessage};
use crate::support::error::{ErrorKind, Outcome};
use std::sync::Arc;
use std::time::Duration;

/// The DSN of every dialect, named for the messages.
fn dsns() -> Vec<(&'static str, String)> {
    let sqlite = std::env::temp_dir().join(format!("nmn-io-{}.db", uuid::Uuid::new_v4()));
    vec![
        (
            "PostgreSQL",
            std::env::var("POSTGRES_DSN")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned()),
        ),
        (
            "MariaDB",
            std::env::var("MYSQL_DSN")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned()),
        ),
        ("SQLite", format!("sqlite://{}", sqlite.display())),
    ]
}

fn engine(dsn: &str, table: &str) -> Arc<dyn Engine> {
    let parsed = crate::support::dsn::parse_sql_dsn(dsn).expect("a valid DSN");
    let config = QueueConfig {
        table: table.to_owned(),
        queue: "q".to_owned(),
        redeliver_timeout_seconds: 60.0,
        use_notify: false,
        connect_timeout: Duration::from_secs(5),
        poll_interval: Duration::from_millis(100),
        notify_timeout: Duration::from_secs(5),
        max_connections: None,
    };
    open_engine(&parsed, config).expect("an engine")
}

fn batch(count: usize) -> Vec<NewMessage> {
    (0..count)
        .map(|n| NewMessage::new(format!("{{\"n\":{n}}}"), "{}".to_owned(), 0.0))
        .collect()
}

/// Fails saying how to start the server when the dialect's server cannot be reached.
async fn set_up(name: &str, engine: &dyn Engine) {
    if let Err(err) = engine.setup().await {
        panic!("{name}: {err} (npm test starts the shared servers; see CONTRIBUTING.md)");
    }
}

#[tokio::test]
async fn each_message_of_a_batch_is_answered_on_every_dialect() {
    for (name, dsn) in dsns() {
        let table = format!("nmn_io_{}", uuid::Uuid::new_v4().simple());
        let queue = engine(&dsn, &table);
        // No table yet (no setup): refused by the server, nothing stored, each message told.
        let refused = queue.insert(batch(3)).await;
        assert_eq!(refused.len(), 3, "{name}");
        for answer in &refused {
            let err = answer.as_ref().expect_err("stored into a missing table");
            assert_eq!(
                (err.kind, err.outcome()),
                (ErrorKind::NotFound, Some(Outcome::NotApplied)),
                "{name}: {err}"
            );
        }
        set_up(name, &*queue).await;
        let stored = queue.insert(batch(5)).await;
        let ids: Vec<String> = stored
            .into_iter()
            .map(|answer| answer.unwrap_or_else(|e| panic!("{name}: {e}")))
            .collect();
        let mut distinct = ids.clone();
        distinct.dedup();
        assert_eq!(distinct.len(), 5, "{name}: {ids:?}");
        assert_eq!(queue.count().await.ok(), Some(5), "{name}");
        queue.shutdown().await;
        drop_table(&dsn, &table).await;
    }
}

/// Removes a test's table (a SQLite file goes with its directory's cleanup).
async fn drop_table(dsn: &str, table: &str) {
    use sqlx::Connection;
    let drop = format!("DROP TABLE IF EXISTS {table}");
    if dsn.starts_with("postgres") {
        if let Ok(mut conn) = sqlx::PgConnection::connect(dsn).await {
            let _ = sqlx::Executor::execute(&mut conn, drop.as_str()).await;
        }
    } else if dsn.starts_with("mysql") {
        if let Ok(mut conn) = sqlx::MySqlConnection::connect(dsn).await {
            let _ = sqlx::Executor::execute(&mut conn, drop.as_str()).await;
        }
    } else if let Some(file) = dsn.strip_prefix("sqlite://") {
        let _ = std::fs::remove_file(file);
    }
}
