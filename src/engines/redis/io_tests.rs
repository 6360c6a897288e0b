//! The stream queue against a real Redis (the shared server at `REDIS_DSN`, default
//! `redis://127.0.0.1:6379`, which `npm test` brings up): what only a server shows. Each test
//! works on streams of its own.

use super::send_batch::SendBatch;
use super::stream::StreamConfig;
use super::stream_queue::RedisQueue;
use crate::queue::engine::NewMessage;
use crate::support::error::Outcome;
use std::time::Duration;

fn dsn() -> String {
    std::env::var("REDIS_DSN").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A queue on a stream of its own, and a plain connection to look at the server with. Fails
/// saying how to start the server when it cannot be reached.
async fn queue_and_client(name: &str) -> (RedisQueue, redis::aio::MultiplexedConnection) {
    let dsn = dsn();
    let client = redis::Client::open(dsn.as_str()).expect("a valid REDIS_DSN");
    let conn = tokio::time::timeout(
        Duration::from_secs(5),
        client.get_multiplexed_async_connection(),
    )
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or_else(|| {
        panic!("Redis is not reachable at {dsn}: npm test starts it (or: redis-server --daemonize yes)")
    });
    let stream = format!("messenger:io-{name}-{}", uuid::Uuid::new_v4());
    let config = StreamConfig {
        key_prefix: String::new(),
        delay_key: format!("{stream}:delayed"),
        stream,
        group: "g".to_owned(),
        consumer: "c".to_owned(),
        claim_idle: Duration::from_secs(30),
        poll_interval: Duration::from_millis(100),
        connect: super::connection::ConnectOptions {
            connect_timeout: Duration::from_secs(5),
            ..Default::default()
        },
        max_connections: None,
        wait_for_replicas: 0,
    };
    let parsed = crate::support::dsn::parse_redis_dsn(&dsn).expect("a valid REDIS_DSN");
    let queue = RedisQueue::open(&parsed, config).expect("a queue");
    (queue, conn)
}

/// Removes a test's stream and delayed set.
async fn remove(queue: &RedisQueue, conn: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("DEL")
        .arg(&queue.stream.config.stream)
        .arg(&queue.stream.config.delay_key)
        .query_async(conn)
        .await
        .expect("DEL");
}

fn messages(due: usize, delayed: usize) -> Vec<NewMessage> {
    let message = |n: usize, delay_ms: f64| {
        NewMessage::new(format!("{{\"n\":{n}}}"), "{}".to_owned(), delay_ms)
    };
    (0..due)
        .map(|n| message(n, 0.0))
        .chain((0..delayed).map(|n| message(due + n, 60_000.0)))
        .collect()
}

/// What `command key` answers: XLEN, ZCARD.
async fn size_of(conn: &mut redis::aio::MultiplexedConnection, command: &str, key: &str) -> u64 {
    redis::cmd(command)
        .arg(key)
        .query_async(conn)
        .await
        .expect(command)
}

/// How often the server has run scripts by their digest (`EVALSHA`) so far.
async fn scripts_run(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_batch_whose_delayed_part_fails_answers_each_message_for_itself() {
    let (queue, mut conn) = queue_and_client("parts").await;
    let (stream, delay_key) = (
        queue.stream.config.stream.clone(),
        queue.stream.config.delay_key.clone(),
    );
    let _: () = redis::cmd("SET")
        .arg(&delay_key)
        .arg("not a sorted set")
        .query_async(&mut conn)
        .await
        .expect("SET");
    let batch = messages(20, 3);
    let answers = queue
        .writer
        .insert_batch(&batch, SendBatch::new(&queue.writer.marker_names, &batch))
        .await;
    let stored = answers[..20].iter().filter(|a| a.is_ok()).count();
    let refused: Vec<_> = answers[20..]
        .iter()
        .map(|a| {
            a.as_ref()
                .err()
                .map(|e| (e.outcome(), e.cause.as_ref().and_then(|c| c.code.clone())))
        })
        .collect();
    let length = size_of(&mut conn, "XLEN", &stream).await;
    remove(&queue, &mut conn).await;
    assert_eq!(stored, 20, "every due message is answered as stored");
    assert_eq!(
        refused,
        vec![Some((Some(Outcome::NotApplied), Some("WRONGTYPE".to_owned()))); 3],
        "each delayed message is refused, as not applied"
    );
    assert_eq!(length, 20);
}

#[tokio::test]
async fn a_batch_of_delayed_messages_is_one_script_call() {
    let (queue, mut conn) = queue_and_client("delayed").await;
    let delay_key = queue.stream.config.delay_key.clone();
    // A first one loads the script (its first call may be a plain EVAL).
    let first = messages(0, 1);
    let _ = queue
        .writer
        .insert_batch(&first, SendBatch::new(&queue.writer.marker_names, &first))
        .await;
    let before = scripts_run(&mut conn).await;
    let batch = messages(0, 50);
    let answers = queue
        .writer
        .insert_batch(&batch, SendBatch::new(&queue.writer.marker_names, &batch))
        .await;
    let calls = scripts_run(&mut conn).await - before;
    let members = size_of(&mut conn, "ZCARD", &delay_key).await;
    remove(&queue, &mut conn).await;
    assert!(answers.iter().all(Result::is_ok));
    assert_eq!(members, 51);
    // Other tests may run scripts meanwhile; this batch's own is one call, not fifty.
    assert!(
        calls < 10,
        "{calls} script calls for one batch of 50 delayed messages"
    );
}
