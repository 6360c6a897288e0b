//! Statement execution written once for every sqlx database a dialect runs on.
//!
//! The shared statements (list, find, count, next due time, lease renewal) have the same
//! binds and result columns in every dialect; only their text differs. [`Driver`] runs them
//! for any sqlx database that can bind and decode those few types. Its bounds are stated once,
//! on the blanket impl, so generic code only names `D::Db: Driver`.

use crate::queue::engine::{ClaimToken, Held, StoredMessage};
use futures_util::future::BoxFuture;
use sqlx::database::{Database, HasStatementCache};
use sqlx::{ColumnIndex, Connection, Decode, Encode, Executor, IntoArguments, Pool, Row, Type};

pub type SqlResult<T> = std::result::Result<T, sqlx::Error>;

/// Where a statement with binds runs: the target's pool, and whether each such statement runs
/// in a transaction of its own (a DSN through a transaction pooler: see `postgres::pooler`).
pub struct Runner<'a, DB: Database> {
    pub pool: &'a Pool<DB>,
    pub in_transaction: bool,
}

impl<DB: Database> Clone for Runner<'_, DB> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<DB: Database> Copy for Runner<'_, DB> {}

/// A value bound to a shared statement, in placeholder order.
#[derive(Debug, Clone, Copy)]
pub enum Param<'a> {
    Text(&'a str),
    Float(f64),
    Int(i64),
}

/// One queue's answer to a table's shared poll (see `super::table_poller`): milliseconds from
/// the server's now to its earliest unclaimed row's `available_at`, and to its earliest claimed
/// row's claim (negative: in the past), each `None` when it has no such row.
#[derive(Debug, Clone, PartialEq)]
pub struct DueRow {
    pub queue: String,
    pub free_ms: Option<f64>,
    pub held_ms: Option<f64>,
}

/// The rows a statement changed, read from each driver's own result type.
pub trait RowsAffected {
    fn rows(&self) -> u64;
}

impl RowsAffected for sqlx::postgres::PgQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

impl RowsAffected for sqlx::mysql::MySqlQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

impl RowsAffected for sqlx::sqlite::SqliteQueryResult {
    fn rows(&self) -> u64 {
        self.rows_affected()
    }
}

/// The generic statement runner; implemented for every database below, never by hand.
pub trait Driver: Database + HasStatementCache {
    /// Rows of `(id, body, headers)` as messages.
    fn fetch_messages<'a>(
        runner: Runner<'a, Self>,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> BoxFuture<'a, SqlResult<Vec<StoredMessage>>>;

    /// The `count` column of a one-row result.
    fn fetch_count<'a>(
        runner: Runner<'a, Self>,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> BoxFuture<'a, SqlResult<i64>>;

    /// The nullable `wait_ms` column of a one-row result.
    fn fetch_wait_ms<'a>(
        runner: Runner<'a, Self>,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> BoxFuture<'a, SqlResult<Option<f64>>>;

    /// Rows of `(id, token)`: the claims a renewal renewed, with their new tokens.
    fn fetch_held(pool: &Pool<Self>, sql: String) -> BoxFuture<'_, SqlResult<Vec<Held>>>;

    /// Rows of `(queue_name, free_ms, held_ms)` from a shared poll's statement with its one
    /// parameter, `names`, bound, on `conn` (see `rows_on` for `in_transaction`).
    fn fetch_due<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c str,
        names: &'c str,
        in_transaction: bool,
    ) -> BoxFuture<'c, SqlResult<Vec<DueRow>>>;

    /// Runs statement text with nothing bound (inlined integer id lists, or a script of
    /// several statements).
    fn execute_text(pool: &Pool<Self>, sql: String) -> BoxFuture<'_, SqlResult<()>>;

    /// Runs a setup script, unless `done` (a query whose `count` column is non-zero when
    /// everything the script creates exists) says there is nothing to do. Another statement
    /// follows at once (the auto-setup runs before a first claim or send): the connection is
    /// back in the pool when this returns (see [`release_now`]), so that statement finds it
    /// idle.
    fn set_up<'a>(
        pool: &'a Pool<Self>,
        done: Option<&'a str>,
        script: &'a str,
    ) -> BoxFuture<'a, SqlResult<()>>;

    /// Statement text with nothing bound, on `conn`, returning how many rows it changed.
    fn execute_counted<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c str,
    ) -> BoxFuture<'c, SqlResult<u64>>;

    /// A `(id, body, headers)` row as a message.
    fn message_of(row: &Self::Row) -> SqlResult<StoredMessage>;

    /// A claimed `(id, body, headers, token)` row as a message held by this process.
    fn claimed_of(row: &Self::Row) -> SqlResult<StoredMessage> {
        let mut message = Self::message_of(row)?;
        message.token = Some(ClaimToken::DeliveredAt(Self::token_of(row)?));
        Ok(message)
    }

    /// The `token` column of a row.
    fn token_of(row: &Self::Row) -> SqlResult<i64>;
}

impl<DB> Driver for DB
where
    DB: Database + HasStatementCache,
    DB::QueryResult: RowsAffected,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> f64: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    for<'r> i64: Decode<'r, DB>,
    for<'r> f64: Decode<'r, DB>,
    &'static str: ColumnIndex<DB::Row>,
{
    fn fetch_messages<'a>(
        runner: Runner<'a, Self>,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> BoxFuture<'a, SqlResult<Vec<StoredMessage>>> {
        Box::pin(async move {
            let rows = bound_rows::<DB>(runner, sql, params).await?;
            rows.iter().map(Self::message_of).collect()
        })
    }

    fn fetch_count<'a>(
        runner: Runner<'a, Self>,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> BoxFuture<'a, SqlResult<i64>> {
        first_value(bound_rows::<DB>(runner, sql, params), "count")
    }

    fn fetch_wait_ms<'a>(
        runner: Runner<'a, Self>,
        sql: &'a str,
        params: &'a [Param<'a>],
    ) -> BoxFuture<'a, SqlResult<Option<f64>>> {
        first_value(bound_rows::<DB>(runner, sql, params), "wait_ms")
    }

    fn fetch_held(pool: &Pool<Self>, sql: String) -> BoxFuture<'_, SqlResult<Vec<Held>>> {
        Box::pin(async move {
            let rows = sqlx::raw_sql(&sql).fetch_all(pool).await?;
            rows.iter()
                .map(|row| {
                    Ok(Held {
                        id: row.try_get("id")?,
                        token: Some(ClaimToken::DeliveredAt(Self::token_of(row)?)),
                    })
                })
                .collect()
        })
    }

    fn fetch_due<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c str,
        names: &'c str,
        in_transaction: bool,
    ) -> BoxFuture<'c, SqlResult<Vec<DueRow>>> {
        Box::pin(async move {
            let query = sqlx::query::<DB>(sql).bind(names);
            let rows = rows_on(conn, in_transaction, query).await?;
            rows.iter()
                .map(|row| {
                    Ok(DueRow {
                        queue: row.try_get("queue_name")?,
                        free_ms: row.try_get("free_ms")?,
                        held_ms: row.try_get("held_ms")?,
                    })
                })
                .collect()
        })
    }

    fn execute_text(pool: &Pool<Self>, sql: String) -> BoxFuture<'_, SqlResult<()>> {
        Box::pin(async move {
            sqlx::raw_sql(&sql).execute(pool).await?;
            Ok(())
        })
    }

    fn set_up<'a>(
        pool: &'a Pool<Self>,
        done: Option<&'a str>,
        script: &'a str,
    ) -> BoxFuture<'a, SqlResult<()>> {
        Box::pin(async move {
            let mut conn = pool.acquire().await?;
            let needed = match done {
                Some(check) => count_on::<DB>(&mut conn, check).await? == 0,
                None => true,
            };
            if needed {
                Self::execute_counted(&mut conn, script).await?;
            }
            release_now(conn).await;
            Ok(())
        })
    }

    fn execute_counted<'c>(
        conn: &'c mut Self::Connection,
        sql: &'c str,
    ) -> BoxFuture<'c, SqlResult<u64>> {
        Box::pin(async move { Ok(conn.execute(sqlx::raw_sql(sql)).await?.rows()) })
    }

    fn message_of(row: &Self::Row) -> SqlResult<StoredMessage> {
        Ok(StoredMessage {
            id: row.try_get("id")?,
            body: text_or_poison::<DB>(row, "body")?,
            headers: text_or_poison::<DB>(row, "headers")?,
            token: None,
        })
    }

    fn token_of(row: &Self::Row) -> SqlResult<i64> {
        row.try_get("token")
    }
}

/// A text column as stored; a value that is not text (say, invalid UTF-8 a foreign writer
/// put in a SQLite file) comes out empty, which no serializer decodes: the row is then poison
/// and removed as such, instead of failing every claim and list that meets it.
fn text_or_poison<DB>(row: &DB::Row, column: &'static str) -> SqlResult<String>
where
    DB: Database,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    &'static str: ColumnIndex<DB::Row>,
{
    match row.try_get::<String, _>(column) {
        Err(sqlx::Error::ColumnDecode { .. }) => Ok(String::new()),
        other => other,
    }
}

/// Column `column` of the first of `rows` (a one-row result).
fn first_value<'a, R: Row, T>(
    rows: BoxFuture<'a, SqlResult<Vec<R>>>,
    column: &'static str,
) -> BoxFuture<'a, SqlResult<T>>
where
    T: for<'r> Decode<'r, R::Database> + Type<R::Database> + Send + 'a,
    &'static str: ColumnIndex<R>,
{
    Box::pin(async move {
        let rows = rows.await?;
        rows.first()
            .ok_or(sqlx::Error::RowNotFound)?
            .try_get::<T, _>(column)
    })
}

/// The rows of `sql` with `params` bound, run as `runner` says.
fn bound_rows<'a, DB>(
    runner: Runner<'a, DB>,
    sql: &'a str,
    params: &'a [Param<'a>],
) -> BoxFuture<'a, SqlResult<Vec<DB::Row>>>
where
    DB: Database + HasStatementCache,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> f64: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    Box::pin(async move {
        let query = bound::<DB>(sql, params);
        if !runner.in_transaction {
            return query.fetch_all(runner.pool).await;
        }
        let mut conn = runner.pool.acquire().await?;
        rows_on(&mut *conn, true, query).await
    })
}

/// The rows of `query` on `conn`; with `in_transaction`, unnamed and inside a transaction of
/// its own, so that a transaction pooler keeps one server connection from the statement's
/// Parse to its Execute (the driver sends them in two exchanges: see `postgres::pooler`).
pub fn rows_on<'c, 'q: 'c, DB>(
    conn: &'c mut DB::Connection,
    in_transaction: bool,
    query: sqlx::query::Query<'q, DB, DB::Arguments<'q>>,
) -> BoxFuture<'c, SqlResult<Vec<DB::Row>>>
where
    DB: Database + HasStatementCache,
    for<'e> &'e mut DB::Connection: Executor<'e, Database = DB>,
    DB::Arguments<'q>: IntoArguments<'q, DB>,
{
    Box::pin(async move {
        if !in_transaction {
            return query.fetch_all(&mut *conn).await;
        }
        let mut tx = conn.begin().await?;
        let rows = query.persistent(false).fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows)
    })
}

/// `sql` with `params` bound in order.
fn bound<'a, DB>(
    sql: &'a str,
    params: &'a [Param<'a>],
) -> sqlx::query::Query<'a, DB, DB::Arguments<'a>>
where
    DB: Database,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> f64: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    params
        .iter()
        .fold(sqlx::query::<DB>(sql), |query, param| match *param {
            Param::Text(text) => query.bind(text),
            Param::Float(value) => query.bind(value),
            Param::Int(value) => query.bind(value),
        })
}

/// The `count` column of a one-row statement run on one connection (boxed: an `async` block
/// naming the executor of a generic connection directly trips the compiler's higher-ranked
/// lifetime check).
fn count_on<'c, DB>(conn: &'c mut DB::Connection, sql: &'c str) -> BoxFuture<'c, SqlResult<i64>>
where
    DB: Database,
    &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'r> i64: Decode<'r, DB> + Type<DB>,
    &'static str: ColumnIndex<DB::Row>,
{
    Box::pin(async move {
        let row = conn.fetch_one(sqlx::raw_sql(sql)).await?;
        row.try_get::<i64, _>("count")
    })
}

/// Hands `conn` back to its pool before returning. sqlx returns a dropped connection from a
/// task of its own, after a ping: a statement that acquires in between finds no idle
/// connection and opens another, which on PostgreSQL is a backend start (milliseconds, and
/// its first statements run on cold caches) on the path to the first message. Not for hot
/// paths: the ping's round trip is then waited for instead of overlapping what follows.
pub async fn release_now<DB: Database>(mut conn: sqlx::pool::PoolConnection<DB>) {
    // Public (if hidden from the docs) in the sqlx version Cargo.lock pins: the drop
    // handler's own work, run here instead of in a spawned task.
    conn.return_to_pool().await;
}
