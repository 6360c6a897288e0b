//! The napi surface: thin classes over `queue::Queue`. Everything here converts arguments and
//! errors; the logic lives in the modules below.

#![cfg_attr(not(test), deny(clippy::unwrap_used))]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg_attr(not(test), macro_use)]
extern crate napi_derive;

pub mod backoff;
pub mod batch;
pub mod completions;
pub mod diagnostics;
pub mod direct_sends;
pub mod dsn;
pub mod durations;
pub mod engine;
pub mod error;
pub mod fence;
pub mod ident;
pub mod js_message;
pub mod js_text;
pub mod loop_callback;
pub mod outage;
pub mod owned_by_thread;
pub mod prefetch;
pub mod queue;
pub mod redis;
pub mod runtime;
pub mod send_order;
pub mod sql;
pub mod stats;
pub mod targets;
pub mod tcp_keepalive;
pub mod uv;
pub mod wake;
pub mod write_behind;

// The exports are left out of `cargo test`: the test executable has no Node to provide the
// napi_* symbols they reference. Everything they call is tested in its own module.
#[cfg(not(test))]
mod exports {
    use super::*;
    use engine::{NewMessage, StoredMessage};
    use error::Error;
    use js_message::JsMessage;
    use js_text::JsText;
    use napi::bindgen_prelude::within_runtime_if_available;
    use napi::bindgen_prelude::JsValue;
    use napi::Env;
    use queue::Queue;
    use sql::QueueConfig;
    use std::sync::Arc;
    use std::time::Duration;

    /// Hands napi-rs our runtime before its first async call; should it fail to build, napi-rs
    /// builds its default one.
    #[napi_derive::module_init]
    fn init() {
        if let Ok(built) = runtime::build() {
            napi::bindgen_prelude::create_custom_tokio_runtime(built);
        }
    }

    /// Options of a native SQL queue, already defaulted by the JavaScript wrapper.
    #[napi(object)]
    pub struct SqlQueueOptions {
        pub dsn: String,
        pub table_name: String,
        pub queue_name: String,
        pub redeliver_timeout_seconds: f64,
        pub poll_interval_ms: f64,
        pub use_notify: bool,
        pub get_notify_timeout_ms: f64,
        pub auto_setup: bool,
        pub connect_timeout_ms: f64,
        pub max_queued_sends: f64,
        pub max_queued_send_bytes: f64,
        /// PostgreSQL: the DSN of the LISTEN connection, when `dsn` goes through a pooler.
        pub listen_dsn: Option<String>,
    }

    /// Options of a native Redis Streams queue, already defaulted by the JavaScript wrapper.
    #[napi(object)]
    pub struct RedisQueueOptions {
        pub dsn: String,
        pub stream: String,
        pub group: String,
        pub consumer: String,
        pub delay_key: String,
        pub claim_idle_ms: f64,
        pub poll_interval_ms: f64,
        pub read_batch_size: u32,
        pub cluster: bool,
        /// PEM certificate(s) to trust over TLS, instead of the system's roots.
        pub tls_ca: Option<String>,
        pub connect_timeout_ms: f64,
        pub max_queued_sends: f64,
        pub max_queued_send_bytes: f64,
        /// What `redisOptions` adds to the DSN.
        pub overrides: Option<RedisOverrides>,
    }

    /// `redisOptions` the DSN says nothing of, checked by the JavaScript wrapper (which refuses
    /// one the DSN contradicts).
    #[napi(object)]
    #[derive(Default)]
    pub struct RedisOverrides {
        /// Prepended to every key (ioredis's `keyPrefix`).
        pub key_prefix: String,
        /// TLS even for `redis://`.
        pub tls: bool,
        /// Client certificate chain and key (PEM).
        pub tls_cert: Option<String>,
        pub tls_key: Option<String>,
        /// Accept any server certificate.
        pub tls_insecure: bool,
        pub port: Option<u32>,
        pub db: Option<u32>,
        pub username: Option<String>,
        pub password: Option<String>,
        /// No `CLIENT SETINFO` on connecting.
        pub disable_client_info: bool,
    }

    /// `queue.stats()`: counters (as doubles: exact up to 2^53) and buffer figures.
    #[napi(object)]
    pub struct NativeStats {
        pub buffered: f64,
        pub in_flight: f64,
        pub pending_acks: f64,
        pub ack_write_failing_ms: Option<f64>,
        pub sent: f64,
        pub claims: f64,
        pub claimed: f64,
        pub empty_claims: f64,
        pub shared_polls: f64,
        pub acked: f64,
        pub rejected: f64,
        pub last_claim_size: f64,
        pub last_claim_ms: f64,
        pub reconnects: f64,
        pub stale_settles: f64,
        pub tracked_ids: f64,
        pub last_error: Option<String>,
    }

    /// An event for the `logger` option: `log`, `warn` or `error`, and what happened.
    #[napi(object)]
    pub struct NativeEvent {
        pub level: String,
        pub message: String,
    }

    /// `queue.health()`: what an answered probe saw.
    #[napi(object)]
    pub struct NativeHealth {
        pub messages: f64,
        pub latency_ms: f64,
    }

    /// A stored message handed to JavaScript: decimal id, body and headers as stored.
    #[napi(object)]
    pub struct NativeMessage {
        pub id: String,
        pub body: String,
        pub headers: String,
    }

    impl From<StoredMessage> for NativeMessage {
        fn from(m: StoredMessage) -> Self {
            Self {
                id: m.id,
                body: m.body,
                headers: m.headers,
            }
        }
    }

    /// What JavaScript may know of the SQL dialect a DSN names, so that it keeps no copy of
    /// these facts of its own.
    #[napi(object)]
    pub struct SqlDialectFacts {
        /// `postgres`, `mysql` or `sqlite`.
        pub dialect: String,
        /// The dialect's name in messages (`PostgreSQL`, `MySQL`, `SQLite`).
        pub label: String,
        /// Idle consumers can be woken by the database (`useNotify` applies).
        pub push_wakeup: bool,
    }

    /// Native queues alive in this process (created and not yet dropped): what a lifecycle
    /// test watches to see closed transports let go.
    #[napi(catch_unwind)]
    pub fn live_native_queues() -> f64 {
        queue::live_queues() as f64
    }

    /// `dsn` with every password in it (userinfo, `password=` / `pass=` parameters) replaced
    /// by `***`, exactly as the addon's own messages show it.
    #[napi(catch_unwind)]
    pub fn redact_dsn(dsn: String) -> String {
        dsn::redact_dsn(&dsn)
    }

    /// The facts of the SQL dialect a DSN names; throws for a bad DSN.
    #[napi(catch_unwind)]
    pub fn sql_dialect_of(dsn: String) -> napi::Result<SqlDialectFacts> {
        let facts = sql::facts_of(dsn::parse_sql_dsn(&dsn)?.dialect);
        Ok(SqlDialectFacts {
            dialect: facts.name.to_owned(),
            label: facts.label.to_owned(),
            push_wakeup: facts.push_wakeup,
        })
    }

    /// An outbox INSERT (see `crate::sql::outbox`): text in the dialect's placeholders and the
    /// names of the values each placeholder takes, in order.
    #[napi(object)]
    pub struct SqlOutboxStatement {
        pub text: String,
        /// `queue`, `body`, `headers`, `delayMs`, `delayMicros` or `channel`, per placeholder.
        pub values: Vec<String>,
    }

    /// The outbox INSERT for a table on the dialect a DSN names; throws for a bad DSN or name.
    #[napi(catch_unwind)]
    pub fn sql_outbox_statement(
        dsn: String,
        table_name: String,
        use_notify: bool,
    ) -> napi::Result<SqlOutboxStatement> {
        let dialect = dsn::parse_sql_dsn(&dsn)?.dialect;
        let statement = sql::outbox::outbox_statement(dialect, &table_name, use_notify)?;
        Ok(SqlOutboxStatement {
            text: statement.text,
            values: statement
                .values
                .iter()
                .map(|v| v.name().to_owned())
                .collect(),
        })
    }

    /// Checks a table name and a queue name as `SqlTransport` takes them; throws an
    /// invalid-argument error naming the limit that was broken.
    #[napi(catch_unwind)]
    pub fn check_sql_names(table_name: String, queue_name: String) -> napi::Result<()> {
        ident::validate_table_name(&table_name)?;
        ident::validate_queue_name(&queue_name)?;
        Ok(())
    }

    fn millis(value: f64, name: &str) -> Result<Duration, Error> {
        if value.is_finite() && value >= 0.0 {
            Ok(durations::millis(value))
        } else {
            Err(Error::invalid_argument(format!(
                "{name} must be a finite number >= 0, got {value}."
            )))
        }
    }

    /// The send backlog the options ask for (`maxQueuedSends`, `maxQueuedSendBytes`).
    fn send_backlog(items: f64, bytes: f64) -> Result<batch::Backlog, Error> {
        for (name, value) in [("maxQueuedSends", items), ("maxQueuedSendBytes", bytes)] {
            if !(value.is_finite() && value >= 1.0 && value.fract() == 0.0) {
                return Err(Error::invalid_argument(format!(
                    "{name} must be a positive integer, got {value}."
                )));
            }
        }
        // Beyond usize on a 32-bit host: as good as unbounded.
        Ok(batch::Backlog {
            items: items as usize,
            bytes: bytes as usize,
        })
    }

    /// One queue (a table's queue, or a stream), bound to the process-wide connections of its DSN.
    #[napi]
    pub struct NativeQueue {
        queue: Arc<Queue>,
        /// Where sends settle (see `completions`), from the first `onSendsSettled` call.
        sends: std::sync::Mutex<Option<SendReporter>>,
        /// Sends served on the JavaScript thread, where the engine has that path.
        direct: std::sync::Mutex<Option<direct_sends::DirectSends>>,
        /// Sends on the runtime's path not settled yet (the direct path waits for none).
        elsewhere: Arc<std::sync::atomic::AtomicUsize>,
    }

    /// Sends that settled together, by the sequence numbers JavaScript gave them: for each,
    /// its id, or the error (coded as every native error is) it failed with.
    #[napi(object)]
    pub struct SettledSends {
        pub seqs: Vec<u32>,
        pub ids: Vec<Option<String>>,
        pub errors: Vec<Option<String>>,
    }

    type SettledTsfn = napi::threadsafe_function::ThreadsafeFunction<
        Vec<completions::Settled<String>>,
        (),
        SettledSends,
        napi::Status,
        false,
        true,
    >;

    struct SendReporter {
        /// Queues a send on the runtime's path (group commit, settled through `completions`).
        to_runtime: direct_sends::ToRuntime,
        /// Weak (it keeps no event loop alive) except while JavaScript waits on a send.
        tsfn: Arc<std::sync::Mutex<SettledTsfn>>,
    }

    fn settled_sends(batch: Vec<completions::Settled<String>>) -> SettledSends {
        let mut settled = SettledSends {
            seqs: Vec::with_capacity(batch.len()),
            ids: Vec::with_capacity(batch.len()),
            errors: Vec::with_capacity(batch.len()),
        };
        for (seq, result) in batch {
            settled.seqs.push(seq);
            match result {
                Ok(id) => {
                    settled.ids.push(Some(id));
                    settled.errors.push(None);
                }
                Err(err) => {
                    settled.ids.push(None);
                    settled.errors.push(Some(err.boundary_message()));
                }
            }
        }
        settled
    }

    #[napi]
    impl NativeQueue {
        /// A SQL queue: validates options and binds to the shared pool; opens no connection.
        #[napi(factory, catch_unwind)]
        pub fn sql(options: SqlQueueOptions) -> napi::Result<Self> {
            let dsn =
                dsn::parse_sql_dsn(&options.dsn)?.with_listen(options.listen_dsn.as_deref())?;
            ident::validate_table_name(&options.table_name)?;
            ident::validate_queue_name(&options.queue_name)?;
            let redeliver = options.redeliver_timeout_seconds;
            if !redeliver.is_finite() || redeliver < 0.0 {
                return Err(Error::invalid_argument(format!(
                    "redeliverTimeoutSeconds must be a finite number >= 0, got {redeliver}."
                ))
                .into());
            }
            let backlog = send_backlog(options.max_queued_sends, options.max_queued_send_bytes)?;
            let config = QueueConfig {
                table: options.table_name,
                queue: options.queue_name,
                // Past a century a lease never lapses in practice; beyond some thousands of
                // years `now() - lease` leaves PostgreSQL's timestamp range.
                redeliver_timeout_seconds: redeliver.min(durations::LONGEST.as_secs_f64()),
                use_notify: options.use_notify,
                connect_timeout: millis(options.connect_timeout_ms, "connectTimeoutMs")?,
                poll_interval: millis(options.poll_interval_ms, "pollIntervalMs")?,
                notify_timeout: millis(options.get_notify_timeout_ms, "getNotifyTimeoutMs")?,
            };
            // Pools spawn their maintenance task on creation: give them napi's runtime.
            let engine = napi::bindgen_prelude::within_runtime_if_available(|| {
                sql::open_engine(&dsn, config)
            })?;
            Ok(Self {
                sends: std::sync::Mutex::new(None),
                direct: std::sync::Mutex::new(None),
                elsewhere: Arc::default(),
                queue: Arc::new(Queue::new(
                    engine,
                    options.auto_setup,
                    queue::FIRST_CLAIM_BATCH,
                    backlog,
                )),
            })
        }

        /// A Redis Streams queue: validates options and prepares the connection target;
        /// opens no connection.
        #[napi(factory, catch_unwind)]
        pub fn redis(options: RedisQueueOptions) -> napi::Result<Self> {
            let dsn = dsn::parse_redis_dsn(&options.dsn)?;
            for (name, value) in [
                ("stream", &options.stream),
                ("group", &options.group),
                ("consumer", &options.consumer),
                ("delayKey", &options.delay_key),
            ] {
                if value.is_empty() {
                    return Err(Error::invalid_argument(format!(
                        "{name} must be a non-empty string."
                    ))
                    .into());
                }
            }
            let given = options.overrides.unwrap_or_default();
            let port = given
                .port
                .map(|port| match u16::try_from(port) {
                    Ok(port) if port > 0 => Ok(port),
                    _ => Err(Error::invalid_argument(format!(
                        "Invalid redisOptions.port {port}: expected 1 to 65535."
                    ))),
                })
                .transpose()?;
            let prefix = given.key_prefix;
            let config = redis::StreamConfig {
                stream: format!("{prefix}{}", options.stream),
                group: options.group,
                consumer: options.consumer,
                delay_key: format!("{prefix}{}", options.delay_key),
                key_prefix: prefix,
                claim_idle: millis(options.claim_idle_ms, "claimIdleMs")?,
                poll_interval: millis(options.poll_interval_ms, "pollIntervalMs")?,
                connect: redis::connection::ConnectOptions {
                    cluster: options.cluster,
                    tls_ca: options.tls_ca.map(|ca| ca.into_bytes()),
                    connect_timeout: millis(options.connect_timeout_ms, "connectTimeoutMs")?,
                    overrides: redis::connection::Overrides {
                        tls: given.tls,
                        tls_cert: given.tls_cert.map(String::into_bytes),
                        tls_key: given.tls_key.map(String::into_bytes),
                        tls_insecure: given.tls_insecure,
                        port,
                        db: given.db.map(i64::from),
                        username: given.username,
                        password: given.password,
                        skip_client_info: given.disable_client_info,
                    },
                },
            };
            let first_batch = options.read_batch_size.clamp(1, queue::MAX_CLAIM_BATCH);
            let backlog = send_backlog(options.max_queued_sends, options.max_queued_send_bytes)?;
            let engine: Arc<dyn engine::Engine> = within_runtime_if_available(|| {
                redis::RedisQueue::open(&dsn, config).map(Arc::new)
            })?;
            Ok(Self {
                sends: std::sync::Mutex::new(None),
                direct: std::sync::Mutex::new(None),
                elsewhere: Arc::default(),
                queue: Arc::new(Queue::new(engine, true, first_batch, backlog)),
            })
        }

        /// Creates the table and index if missing (always runs; refreshes the autoSetup memo).
        #[napi]
        pub async fn setup(&self) -> napi::Result<()> {
            Ok(self.queue.setup().await?)
        }

        /// Sets where sends settle: `callback` receives every batch of settled sends (once;
        /// later calls are ignored). Call before the first `sendQueued`. `directSends` says
        /// whether sends may be served on this thread's event loop: only where the host is
        /// Node.js itself (other runtimes export libuv's names as stubs that crash).
        #[napi(catch_unwind)]
        pub fn on_sends_settled(
            &self,
            env: &Env,
            callback: napi::bindgen_prelude::Function<'_, SettledSends, ()>,
            direct_sends: Option<bool>,
        ) -> napi::Result<()> {
            let mut sends = self.sends.lock().unwrap_or_else(|p| p.into_inner());
            if sends.is_some() {
                return Ok(());
            }
            let tsfn: SettledTsfn = callback
                .build_threadsafe_function::<Vec<completions::Settled<String>>>()
                .callee_handled::<false>()
                .weak::<true>()
                .build_callback(|ctx| Ok(settled_sends(ctx.value)))?;
            let tsfn = Arc::new(std::sync::Mutex::new(tsfn));
            let reporter = tsfn.clone();
            let report: direct_sends::Report = Arc::new(move |batch| {
                // Fails only once the environment is tearing down: nobody is waiting.
                let reporter = reporter.lock().unwrap_or_else(|p| p.into_inner());
                let _ = reporter.call(
                    batch,
                    napi::threadsafe_function::ThreadsafeFunctionCallMode::NonBlocking,
                );
            });
            let to_js = report.clone();
            let completions = within_runtime_if_available(|| {
                completions::Completions::start(move |batch| to_js(batch))
            });
            let (queue, elsewhere) = (self.queue.clone(), self.elsewhere.clone());
            let to_runtime: direct_sends::ToRuntime = Arc::new(move |seq, message| {
                // Queued here, on the calling thread: the order of calls is the order of the rows.
                let stored = within_runtime_if_available(|| queue.send(message))?;
                let elsewhere = elsewhere.clone();
                elsewhere.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                completions.push(seq, async move {
                    let result = stored.await;
                    elsewhere.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                    result
                })
            });
            *sends = Some(SendReporter {
                to_runtime: to_runtime.clone(),
                tsfn,
            });
            if direct_sends != Some(true) {
                return Ok(());
            }
            // The direct path's settles reach JavaScript from its loop callbacks with no
            // threadsafe-function hop; a host without libuv (or an engine without the path)
            // just has no direct path.
            // SAFETY: inside this napi call, on its thread; `callback` is a function.
            let here = unsafe { loop_callback::LoopCallback::new(env.raw(), callback.raw()) };
            let report_here = here.map(|here| -> direct_sends::LoopReport {
                std::rc::Rc::new(move |batch| {
                    let mut batch = Some(batch);
                    // SAFETY: the direct path calls this only from its loop callbacks.
                    let called = unsafe {
                        here.call(|env| {
                            let settled = settled_sends(batch.take().unwrap_or_default());
                            // On the env's thread, inside the scope `call` opened.
                            <SettledSends as napi::bindgen_prelude::ToNapiValue>::to_napi_value(
                                env, settled,
                            )
                        })
                    };
                    if called {
                        None
                    } else {
                        batch
                    }
                })
            });
            *self.direct.lock().unwrap_or_else(|p| p.into_inner()) = direct_sends::DirectSends::new(
                env,
                self.queue.clone(),
                report,
                report_here,
                to_runtime,
                self.elsewhere.clone(),
            );
            Ok(())
        }

        /// Stores one message as send `seq`; sends in flight together share one INSERT and
        /// keep the order of the calls. The id (or the failure) comes back through the
        /// `onSendsSettled` callback; a message the storage is known to refuse throws here.
        #[napi(
            catch_unwind,
            ts_args_type = "seq: number, body: string, headers: string, delayMs: number"
        )]
        pub fn send_queued(
            &self,
            seq: u32,
            body: JsText,
            headers: JsText,
            delay_ms: f64,
        ) -> napi::Result<()> {
            let mut message = NewMessage::new(body.0, headers.0, delay_ms);
            let sends = self.sends.lock().unwrap_or_else(|p| p.into_inner());
            let Some(reporter) = sends.as_ref() else {
                return Err(Error::transport("sendQueued() before onSendsSettled().").into());
            };
            if let Some(direct) = self
                .direct
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
            {
                match direct.try_send(seq, message)? {
                    None => return Ok(()),
                    Some(back) => message = back,
                }
            }
            Ok((reporter.to_runtime)(seq, message)?)
        }

        /// Keeps the event loop alive while JavaScript waits on sends (from the first one
        /// queued until the last one settled); `false` lets it go.
        #[napi(catch_unwind)]
        #[allow(deprecated)] // napi-rs's own way to (un)ref a threadsafe function.
        pub fn hold_loop(&self, env: &Env, hold: bool) -> napi::Result<()> {
            let mut sends = self.sends.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(reporter) = sends.as_mut() {
                let mut tsfn = reporter.tsfn.lock().unwrap_or_else(|p| p.into_inner());
                if hold {
                    tsfn.refer(env)?;
                } else {
                    tsfn.unref(env)?;
                }
            }
            Ok(())
        }

        /// The next prefetched message as `[id, body, headers]`, or null when the buffer is
        /// empty. Never waits.
        #[napi(
            catch_unwind,
            ts_return_type = "[id: string, body: string, headers: string] | null"
        )]
        pub fn take(&self) -> Option<JsMessage> {
            self.queue.take().map(JsMessage)
        }

        /// Claims a batch, waiting while the queue is idle. Resolves true when `take()` has
        /// something, false when `cancelWait(waitId)` or close ended the wait.
        #[napi]
        pub async fn fill(&self, wait_id: u32) -> napi::Result<bool> {
            Ok(self.queue.fill(wait_id).await?)
        }

        /// Ends the `fill` of `waitId`, or makes its next `fill` return false at once.
        #[napi(catch_unwind)]
        pub fn cancel_wait(&self, wait_id: u32) {
            self.queue.cancel_wait(wait_id);
        }

        /// Forgets `waitId` when its `get()` loop ends.
        #[napi(catch_unwind)]
        pub fn forget_wait(&self, wait_id: u32) {
            self.queue.forget_wait(wait_id);
        }

        /// Makes prefetched, never-yielded messages claimable again.
        #[napi]
        pub async fn release_prefetched(&self) -> napi::Result<()> {
            Ok(self.queue.release_prefetched().await?)
        }

        /// Deletes by id (idempotent); concurrent calls share one DELETE.
        #[napi]
        pub async fn ack(&self, id: String) -> napi::Result<()> {
            Ok(self.queue.ack(&id).await?)
        }

        /// Records an ack now and writes its delete in the background with the others
        /// (write-behind); `close`, `list`, `find` and `count` wait for those writes.
        #[napi(catch_unwind)]
        pub fn ack_later(&self, id: String) -> napi::Result<()> {
            Ok(within_runtime_if_available(|| self.queue.ack_later(id))?)
        }

        /// Write-behind acks recorded and not yet written (JavaScript keeps its event loop
        /// alive while there are any).
        #[napi(catch_unwind)]
        pub fn pending_acks(&self) -> f64 {
            self.queue.stats_pending_acks() as f64
        }

        /// Stops renewing the claim of a delivered message that JavaScript settled without a
        /// write (its handler is done); acks and rejects do this themselves.
        #[napi(catch_unwind)]
        pub fn settled(&self, id: String) {
            self.queue.given_up(&id);
        }

        /// Counters and buffer figures of this instance, read synchronously (see `stats.rs`).
        #[napi(catch_unwind)]
        pub fn stats(&self) -> NativeStats {
            let s = self.queue.stats();
            NativeStats {
                buffered: s.buffered as f64,
                in_flight: s.in_flight as f64,
                pending_acks: s.pending_acks as f64,
                ack_write_failing_ms: s.ack_write_failing_ms,
                sent: s.sent as f64,
                claims: s.claims as f64,
                claimed: s.claimed as f64,
                empty_claims: s.empty_claims as f64,
                shared_polls: s.shared_polls as f64,
                acked: s.acked as f64,
                rejected: s.rejected as f64,
                last_claim_size: s.last_claim_size as f64,
                last_claim_ms: s.last_claim_ms,
                reconnects: s.reconnects as f64,
                stale_settles: s.stale_settles as f64,
                tracked_ids: s.tracked_ids as f64,
                last_error: s.last_error,
            }
        }

        /// Replaces message `id` by a copy in one statement; null if `id` no longer exists.
        #[napi]
        pub async fn redeliver(
            &self,
            id: String,
            body: String,
            headers: String,
            delay_ms: f64,
        ) -> napi::Result<Option<String>> {
            Ok(self
                .queue
                .redeliver(&id, NewMessage::new(body, headers, delay_ms))
                .await?)
        }

        #[napi]
        pub async fn list(&self, limit: u32) -> napi::Result<Vec<NativeMessage>> {
            Ok(self
                .queue
                .list(limit)
                .await?
                .into_iter()
                .map(NativeMessage::from)
                .collect())
        }

        #[napi]
        pub async fn find(&self, id: String) -> napi::Result<Option<NativeMessage>> {
            Ok(self.queue.find(&id).await?.map(NativeMessage::from))
        }

        #[napi]
        pub async fn count(&self) -> napi::Result<f64> {
            Ok(self.queue.count().await? as f64)
        }

        /// From now on, keeps the events a logger must hear of, for `takeEvents`.
        #[napi(catch_unwind)]
        pub fn watch_events(&self) {
            self.queue.watch_events();
        }

        /// The events kept since the last call, oldest first.
        #[napi(catch_unwind)]
        pub fn take_events(&self) -> Vec<NativeEvent> {
            self.queue
                .take_events()
                .into_iter()
                .map(|e| NativeEvent {
                    level: e.level.name().to_owned(),
                    message: e.message,
                })
                .collect()
        }

        /// A bounded health probe: the message count and the probe's duration in ms.
        #[napi]
        pub async fn health(&self, timeout_ms: f64) -> napi::Result<NativeHealth> {
            let bound = millis(timeout_ms, "timeoutMs")?;
            let (messages, took) = self.queue.health(bound).await?;
            Ok(NativeHealth {
                messages: messages as f64,
                latency_ms: took.as_secs_f64() * 1000.0,
            })
        }

        /// Stops new claims and ends every idle wait at once.
        #[napi(catch_unwind)]
        pub fn begin_close(&self) {
            // Batches in flight on the direct path go on, as the same batches, on the runtime.
            if let Some(direct) = self.direct.lock().unwrap_or_else(|p| p.into_inner()).take() {
                direct.shut();
            }
            self.queue.begin_close();
        }

        /// Releases prefetched rows and lets go of the shared pool; then of the send callback,
        /// whose strong reference would otherwise keep this object (and the native queue, its
        /// tasks and memory) alive for as long as the environment lives.
        #[napi]
        pub async fn close(&self) -> napi::Result<()> {
            let closed = self.queue.close().await;
            // JavaScript waits for every send before it closes: nothing is left to report.
            drop(self.sends.lock().unwrap_or_else(|p| p.into_inner()).take());
            Ok(closed?)
        }
    }
}
