import type {
  Envelope,
  ListableReceiver,
  MessageCountAware,
  MessageRetriever,
  Serializer,
  TransportInterface,
} from '@schally/nestjs-messenger';

/**
 * What the `logger` option takes: a NestJS `LoggerService` fits (`new Logger('Messenger')`,
 * `new ConsoleLogger()`, the `Logger` class, pino or winston adapters). A logger with a context
 * of its own (Nest keeps it in `context`) is called with the transport leading the message, so
 * Nest prints each line once; any other is called as `(message, context)`, the context naming
 * the transport (`SQL transport "orders"`). See docs/nestjs.md.
 */
export interface TransportLogger {
  log(message: string, context?: string): unknown;
  warn(message: string, context?: string): unknown;
  error(message: string, context?: string): unknown;
}

/** What `health()` found: `up` with the queue's message count and the probe's latency, or `down` with the error. */
export interface TransportHealth {
  readonly status: 'up' | 'down';
  readonly details: {
    /** The transport's `name`. */
    readonly transport: string;
    readonly messages?: number;
    readonly latencyMs?: number;
    /** Why it is down (never a password). */
    readonly error?: string;
  };
}

/** What every transport of this package shares for health checks: `SqlTransport` and `RedisStreamsTransport` both fit. */
export interface HealthCheckedTransport {
  /**
   * Reads the message count within `timeoutMs` (default 2000). A failure of the server or the
   * transport resolves as `down` with the error; it rejects only for an invalid `timeoutMs`.
   */
  health(options?: { timeoutMs?: number }): Promise<TransportHealth>;
}

/** `@nestjs/terminus`'s result for one indicator: `{ [key]: { status, ...details } }`. */
export type TransportHealthIndicatorResult<Key extends string = string> = {
  [K in Key]: { status: 'up' | 'down' } & TransportHealth['details'];
};

/**
 * The part of `@nestjs/terminus`'s `HealthIndicatorService` (11 and later) the indicator uses;
 * terminus's own class fits.
 */
export interface HealthIndicatorServiceLike {
  check(key: string): { up(data?: any): unknown; down(data?: any): unknown };
}

/**
 * A `@nestjs/terminus` health indicator for any transport of this package, without a hard
 * dependency on terminus. On terminus 11+, construct it with terminus's
 * `HealthIndicatorService` (a `down` is returned through it); on terminus 10, without
 * arguments (a `down` is thrown as terminus 10's `HealthCheckError` is).
 *
 * ```ts
 * health.check([() => this.messenger.isHealthy('orders', ordersTransport)]);
 * ```
 */
export declare class TransportHealthIndicator {
  constructor(healthIndicatorService?: HealthIndicatorServiceLike);
  /**
   * Calls `transport.health(options)` and reports it under `key`: up, or down with the error.
   * With a `HealthIndicatorService` a `down` is returned through it; without one (terminus 10)
   * it rejects with a `HealthCheckError`-shaped error carrying the result in `causes`. Either
   * way it also rejects for a bad argument (a key that is not a non-empty string, an object
   * without `health()`, an invalid timeout).
   */
  isHealthy<const Key extends string>(
    key: Key,
    transport: HealthCheckedTransport,
    options?: { timeoutMs?: number },
  ): Promise<TransportHealthIndicatorResult<Key>>;
}

/** A snapshot of one transport instance from `stats()`: read synchronously, no I/O. */
export interface TransportStats {
  /** Claimed messages waiting in this instance's prefetch buffer. */
  readonly buffered: number;
  /** Delivered messages whose handler has not acked or rejected them yet. */
  readonly inFlight: number;
  /** Write-behind acks recorded and not yet written. */
  readonly pendingAcks: number;
  /**
   * How long (ms) write-behind ack writes have been failing, or null while they succeed. Past
   * the lease (`redeliverTimeoutSeconds`, `claimIdleMs`) their messages may be delivered again.
   */
  readonly ackWriteFailingMs: number | null;
  /** Messages stored by `send()`. */
  readonly sent: number;
  /** Claims that returned messages, and how many messages they returned in all. */
  readonly claims: number;
  readonly claimed: number;
  /** Claims that found nothing to take. */
  readonly emptyClaims: number;
  /**
   * Polls this process ran for the idle consumers of this transport's table on its DSN, or of
   * its Redis node: one per `pollIntervalMs` answers for every idle queue, however many. SQL:
   * MySQL/MariaDB and SQLite, and PostgreSQL while NOTIFY does not wake them (`useNotify:
   * false`, its LISTEN connection down, PgBouncer without `listenDsn`). Redis (single node): the
   * poll for due delayed members and stalled entries of the idle consumers that share one read.
   * 0 where idle consumers do not poll.
   */
  readonly sharedPolls: number;
  /** Messages acked (write-behind: recorded), poison removals included. */
  readonly acked: number;
  /** Messages rejected (sent back for redelivery). */
  readonly rejected: number;
  /** Undecodable messages removed by `get()` (type and id are never the body). */
  readonly poisonRemoved: number;
  /** The last claim that returned messages: how many, and how long its statement ran (ms). */
  readonly lastClaimSize: number;
  readonly lastClaimMs: number;
  /** Times a consumer had its server back after riding out a connection failure. */
  readonly reconnects: number;
  /**
   * Acks and rejects that came after this instance's claim had lapsed and another consumer
   * had taken the message over: ignored (fenced), they deleted and copied nothing.
   */
  readonly staleSettles: number;
  /**
   * Claimed message ids this instance keeps for its claims (their fencing tokens; a Redis
   * consumer's own pending entries that it holds): bounded by what it claimed recently,
   * whatever was given up or taken over by other consumers.
   */
  readonly trackedIds: number;
  /** The message of the last error met, or null (never a password). */
  readonly lastError: string | null;
}

/**
 * Options of {@link SqlTransport}: upstream's, with the same defaults, plus seven of its own:
 * `listenDsn`, `maxConnections`, `connectTimeoutMs`, `ackMode`, `maxQueuedSends`,
 * `maxQueuedSendBytes` and `logger`.
 */
export interface SqlTransportOptions {
  /**
   * `postgres://` / `postgresql://`, `mysql://` / `mariadb://` or `sqlite://` DSN (query
   * parameters such as `sslmode` go to the driver). PostgreSQL: several hosts
   * (`a:5432,b:5433`) and `target_session_attrs` (`any`, `read-write`, `primary`) as libpq reads
   * them; a transaction pooler (PgBouncer) is found on connecting, or said with `pgbouncer=true`
   * (see `listenDsn`).
   * An invalid DSN or unknown scheme throws `TransportConnectionError`.
   */
  readonly dsn: string;
  /** Logical queue within the table. Default `'default'`; 1 to 190 characters. */
  readonly queueName?: string;
  /** Name written into `ReceivedStamp`; must equal the routing alias for retries. Default: `queueName`. */
  readonly name?: string;
  /** Table holding the messages, matching `/^[a-z_][a-z0-9_]{0,47}$/`. Default `'messenger_messages'`. */
  readonly tableName?: string;
  /** Serializer on the wire. Default `new JsonSerializer()`; register your message classes. */
  readonly serializer?: Serializer;
  /** Seconds after which a claimed, unsettled message is claimable again. Default 3600. */
  readonly redeliverTimeoutSeconds?: number;
  /** Create the table and index on first use. Default true. */
  readonly autoSetup?: boolean;
  /** Idle poll period (ms) when push wake-ups are off or down. Default 100. */
  readonly pollIntervalMs?: number;
  /** PostgreSQL only: NOTIFY on insert and LISTEN while idle. Default true. */
  readonly useNotify?: boolean;
  /** PostgreSQL only: longest idle wait (ms) on LISTEN before re-checking. Default 60000. */
  readonly getNotifyTimeoutMs?: number;
  /**
   * PostgreSQL only: a DSN straight to the database for the LISTEN connection, when `dsn` goes
   * through a pooler. A `dsn` through PgBouncer in transaction mode cannot carry LISTEN:
   * without `listenDsn` idle consumers poll every `pollIntervalMs`.
   */
  readonly listenDsn?: string;
  /**
   * The most connections this process opens to `dsn`, for every transport on it together:
   * the pool, and on PostgreSQL the LISTEN connection when it goes to `dsn`. At least 4 (5 on
   * PostgreSQL with LISTEN on `dsn`): claims, acks and sends each keep a connection between
   * statements, and one more serves the rest. Default 11 on PostgreSQL (10 + LISTEN), 10 on MySQL/MariaDB, 4 on SQLite.
   * Transports on one DSN share one budget: one that names another value is refused.
   */
  readonly maxConnections?: number;
  /** How long a first connection may take before `TransportConnectionError`. Default 5000. */
  readonly connectTimeoutMs?: number;
  /**
   * `'write-behind'` (default): `ack()` resolves at once and the delete is written with the
   * acks around it, always before `close()`/`list()`/`find()`/`getMessageCount()` resolve (a
   * crash in between costs a redelivery, never a loss). `'commit'`: `ack()` resolves once its
   * delete is written.
   */
  readonly ackMode?: 'write-behind' | 'commit';
  /**
   * Sends that may wait to be written (during an outage, say) before `send()` is refused at once
   * with a `TransportError` (nothing stored). Default 10000.
   */
  readonly maxQueuedSends?: number;
  /** Bytes (bodies and headers) of sends that may wait to be written; default 64 MiB. */
  readonly maxQueuedSendBytes?: number;
  /**
   * Where the transport reports a consumer's lost and re-established connection (PostgreSQL:
   * the LISTEN connection's too, and a transaction pooler that leaves idle consumers polling),
   * failing write-behind acks, a server refusing the consumer (credentials, a database gone),
   * a table gone under a live consumer (re-created with `autoSetup`), and each poison message
   * removed (its id and type, never its body). A NestJS `LoggerService`-shaped object gets every
   * line. Left out, Nest's own `Logger` (with the transport as its context) does when the app has
   * `@nestjs/common`, so the lines go where the app's do; without NestJS, warnings and errors are
   * process warnings with a stable `code` (`NMN_CONNECTION_LOST`, …) and plain log lines are
   * dropped. `false`: silent.
   */
  readonly logger?: TransportLogger | false;
}

/**
 * Database-backed transport: same table, options and semantics as
 * `@schally/nestjs-messenger-transport-sql`, with batched claims, coalesced writes and
 * blocking idle waits in Rust.
 */
export declare class SqlTransport
  implements TransportInterface, ListableReceiver, MessageRetriever, MessageCountAware, HealthCheckedTransport
{
  constructor(options: SqlTransportOptions);
  /** Creates the table and index if missing; always runs. */
  setup(): Promise<void>;
  send(envelope: Envelope): Promise<Envelope>;
  get(signal: AbortSignal): AsyncIterableIterator<Envelope>;
  ack(envelope: Envelope): Promise<void>;
  reject(envelope: Envelope): Promise<void>;
  list(limit?: number): AsyncIterableIterator<Envelope>;
  find(id: string): Promise<Envelope | undefined>;
  getMessageCount(): Promise<number>;
  /** Counters of this instance, read synchronously. */
  stats(): TransportStats;
  /**
   * Reads the message count within `timeoutMs` (default 2000). A failure of the server or the
   * transport resolves as `down` with the error; it rejects only for an invalid `timeoutMs`.
   */
  health(options?: { timeoutMs?: number }): Promise<TransportHealth>;
  /**
   * The transactional outbox: the INSERT that stores `envelope` exactly as `send()` would, for
   * the app to run with its own client inside its own transaction (stored if and only if it
   * commits; on PostgreSQL with `useNotify`, idle consumers are woken at commit). Builds the
   * statement only.
   */
  outboxStatement(envelope: Envelope, options?: OutboxStatementOptions): OutboxStatement;
  close(): Promise<void>;
}

/** Options of {@link SqlTransport.outboxStatement}. */
export interface OutboxStatementOptions {
  /**
   * `'native'` (default): the dialect's own placeholders. `'?'`: `?` on every dialect (on
   * PostgreSQL one value per occurrence), for clients that number placeholders themselves
   * (Knex `raw`, MikroORM `execute`).
   */
  readonly placeholders?: 'native' | '?';
}

/**
 * An outbox INSERT from {@link SqlTransport.outboxStatement}: `text` in the dialect's own
 * placeholders (`$1…` on PostgreSQL, `?` on MySQL and SQLite) and `values` to bind, in order
 * (a fresh array each call, so it goes to any driver or ORM as it is).
 * The new id: the returned row's `id` on PostgreSQL, `insertId` / `LAST_INSERT_ID()` on MySQL,
 * `lastInsertRowid` / `last_insert_rowid()` on SQLite.
 */
export interface OutboxStatement {
  readonly dialect: 'postgres' | 'mysql' | 'sqlite';
  readonly text: string;
  readonly values: Array<string | number>;
}

/**
 * Options of {@link RedisStreamsTransport}: upstream's, with the same defaults, plus eight of its
 * own: `cluster`, `maxConnections`, `waitForReplicas`, `connectTimeoutMs`, `ackMode`,
 * `maxQueuedSends`, `maxQueuedSendBytes` and `logger`.
 */
export interface RedisStreamsTransportOptions {
  /**
   * `redis://[user:password@]host[:port][/db]`, or `rediss://` for TLS. An invalid DSN or
   * another scheme throws `TransportConnectionError`.
   */
  readonly dsn: string;
  /** The stream key, used verbatim (after `redisOptions.keyPrefix`). On a cluster, give it a hash tag: `messenger:{async}`. */
  readonly stream: string;
  /** Name written into `ReceivedStamp`; must equal the routing alias for retries. Default: `stream`. */
  readonly name?: string;
  /** Consumer group shared by every worker of the stream. Default `'messenger'`. */
  readonly group?: string;
  /** This instance's consumer name, unique per instance. Default `<pid>-<uuid>`. */
  readonly consumer?: string;
  /** Serializer on the wire. Default `new JsonSerializer()`; register your message classes. */
  readonly serializer?: Serializer;
  /** Sorted set holding not-yet-due delayed messages. Default `<stream>:delayed`. */
  readonly delayKey?: string;
  /** Idle time (ms) after which an entry pending on another consumer is taken over. Default 30000. */
  readonly claimIdleMs?: number;
  /** Longest blocking read (ms) before delayed messages are checked again. Default 50. */
  readonly pollIntervalMs?: number;
  /** Size of the first read; later reads adapt to the consumer's pace (1 to 1024). Default 10. */
  readonly readBatchSize?: number;
  /** Connect to a Redis Cluster through the DSN's node (MOVED/ASK are followed). Default false. */
  readonly cluster?: boolean;
  /**
   * ioredis options, as upstream passes them to `new Redis(dsn, redisOptions)`: an ioredis
   * `RedisOptions` value fits. Read as ioredis reads them (the DSN's settings win, these fill in
   * what it leaves out), and every key is honoured, accepted as asking nothing of this transport,
   * or refused by name with `InvalidArgumentError`: see {@link RedisConnectionOptions}.
   */
  readonly redisOptions?: RedisConnectionOptions;
  /**
   * The most connections this process opens to the node, for every transport on it together:
   * the command connection, the read idle consumers share, the send connection, and what is
   * left for idle consumers to block on reads of their own (the fastest wake-up; the others
   * share the one read) and for the send connections of threads past the first that sends,
   * worker threads say (past those, a thread sends over the command connection). At least 3; default 7 (four own reads). Single node only: refused
   * with `cluster: true`, where a process holds two connections per node whatever the number
   * of queues. Transports on one DSN share one budget: one that names another value is
   * refused.
   */
  readonly maxConnections?: number;
  /**
   * Sends that survive a hard failover: `send()` resolves only once its write has reached this
   * many replicas (Redis `WAIT`, bounded by `connectTimeoutMs`); a send the replicas did not
   * acknowledge in time rejects with `error.outcome` `'unknown'` (it is on the master, and may
   * be lost if the master fails before a replica has it). Default 0: resolve once the master
   * stored it (replication is asynchronous). Single node only; see docs/reliability.md,
   * "Which failovers a resolved send survives".
   */
  readonly waitForReplicas?: number;
  /**
   * How long connecting, and each command's reply, may take before `TransportConnectionError`.
   * Default: `redisOptions.connectTimeout` if given (the two must agree when both are), else 5000.
   */
  readonly connectTimeoutMs?: number;
  /**
   * `'write-behind'` (default): `ack()` resolves at once and the delete is written with the
   * acks around it, always before `close()`/`list()`/`find()`/`getMessageCount()` resolve (a
   * crash in between costs a redelivery, never a loss). `'commit'`: `ack()` resolves once its
   * delete is written.
   */
  readonly ackMode?: 'write-behind' | 'commit';
  /**
   * Sends that may wait to be written (during an outage, say) before `send()` is refused at once
   * with a `TransportError` (nothing stored). Default 10000.
   */
  readonly maxQueuedSends?: number;
  /** Bytes (bodies and headers) of sends that may wait to be written; default 64 MiB. */
  readonly maxQueuedSendBytes?: number;
  /**
   * Where the transport reports a consumer's lost and re-established connection, failing
   * write-behind acks, a server refusing the consumer (credentials, a database number it does
   * not have), a stream or group gone under a live consumer, and each poison message removed
   * (its id and type, never its body). A NestJS `LoggerService`-shaped object gets every line.
   * Left out, Nest's own `Logger` (with the transport as its context) does when the app has
   * `@nestjs/common`, so the lines go where the app's do; without NestJS, warnings and errors are
   * process warnings with a stable `code` (`NMN_CONNECTION_LOST`, …) and plain log lines are
   * dropped. `false`: silent.
   */
  readonly logger?: TransportLogger | false;
}

/**
 * The ioredis options {@link RedisStreamsTransport} reads (`redisOptions`), typed so that an
 * ioredis `RedisOptions` value fits. Like ioredis, the DSN's own host, port, credentials and
 * database win; a key here that contradicts the DSN is refused rather than dropped. Any key not
 * declared here (`retryStrategy`, `maxRetriesPerRequest`, `connectionName`, `natMap`, …) is
 * refused by name at construction, unless it is `undefined` or, for the keys docs/redis-options.md
 * lists (`maxRetriesPerRequest: 20`, `enableOfflineQueue: true`, `connectionName: null`, …),
 * set to ioredis's default.
 */
export interface RedisConnectionOptions {
  /** Must name the DSN's host (ioredis connects to the DSN's). */
  readonly host?: string | undefined;
  /** Used when the DSN has no port. */
  readonly port?: number | undefined;
  /** ACL user, when the DSN has no credentials. */
  readonly username?: string | undefined;
  /** Password, when the DSN has no credentials. Never shown in a message. */
  readonly password?: string | undefined;
  /** Database index, when the DSN has no `/db` (0 only on a cluster). */
  readonly db?: number | undefined;
  /**
   * Put before every key the transport touches (stream, delayed set, its own helper keys), as
   * ioredis does: transports and upstream instances with the same prefix share the queue.
   */
  readonly keyPrefix?: string | undefined;
  /** 0 (default), 4 or 6; 4 and 6 only with an IP address as the DSN's host (used as is). */
  readonly family?: number | undefined;
  /** Milliseconds; the `connectTimeoutMs` default (see there). */
  readonly connectTimeout?: number | undefined;
  /** `true`: no `CLIENT SETINFO` when connecting. */
  readonly disableClientInfo?: boolean | undefined;
  /**
   * The server's Unix socket, used instead of the DSN's host and port (the DSN still gives the
   * credentials and database). Not with `tls` or a `rediss://` DSN (no TLS over a Unix
   * socket), nor with `sentinels` or `cluster: true`.
   */
  readonly path?: string | undefined;
  /**
   * Redis Sentinel: the sentinels to ask (each defaulting to `localhost`, 26379) for the master
   * named `name`. The DSN's credentials and database are the master's; its host and port are
   * not used. Not with `tls`, a `rediss://` DSN, `path` or `cluster: true`: the master is
   * reached without TLS.
   */
  readonly sentinels?: ReadonlyArray<{ readonly host?: string; readonly port?: number }> | null | undefined;
  /** With `sentinels`: the master's name the sentinels know. */
  readonly name?: string | null | undefined;
  /** With `sentinels`: `'master'` (the default); `'slave'` is refused at construction: the transport writes. */
  readonly role?: 'master' | 'slave' | undefined;
  /** With `sentinels`: the sentinels' own user and password. */
  readonly sentinelUsername?: string | undefined;
  readonly sentinelPassword?: string | undefined;
  /** Accepted at any value: `+switch-master` is always followed. */
  readonly failoverDetector?: boolean | undefined;
  /** Any object turns TLS on, for `redis://` too, as in ioredis. */
  readonly tls?: RedisTlsOptions | undefined;
  /** Accepted, no effect: connections are made on first use anyway. */
  readonly lazyConnect?: boolean | undefined;
  /** Accepted, no effect: a server still loading its data is waited out. */
  readonly enableReadyCheck?: boolean | undefined;
  /** Accepted, no effect: they shape ioredis's replies and stacks, which the app never sees here. */
  readonly showFriendlyErrorStack?: boolean | undefined;
  readonly stringNumbers?: boolean | undefined;
  /** Accepted, no effect: the transport batches its own commands and subscribes to nothing. */
  readonly enableAutoPipelining?: boolean | undefined;
  readonly autoPipeliningIgnoredCommands?: ReadonlyArray<string> | undefined;
  readonly autoResubscribe?: boolean | undefined;
  readonly autoResendUnfulfilledCommands?: boolean | undefined;
  /** Accepted, no effect: TCP keepalive is always on, with the transport's own timings. */
  readonly keepAlive?: number | undefined;
}

/** The TLS options {@link RedisConnectionOptions} honours; any other key is refused by name. */
export interface RedisTlsOptions {
  /** CAs to trust instead of the system's roots: PEM, or an array of PEMs. */
  readonly ca?: string | Buffer | ReadonlyArray<string | Buffer> | undefined;
  /** Client certificate chain (PEM), for a server that asks for one; needs `key`. */
  readonly cert?: string | Buffer | ReadonlyArray<string | Buffer> | undefined;
  /** The client certificate's private key (unencrypted PEM; a `{ pem, passphrase }` is refused). */
  readonly key?: string | Buffer | ReadonlyArray<string | Buffer | { readonly pem: string | Buffer; readonly passphrase?: string | undefined }> | undefined;
  /** Must name the DSN's host: the name sent and checked is the host's. */
  readonly servername?: string | undefined;
  /** `false` accepts any server certificate (no chain or name check). Default true. */
  readonly rejectUnauthorized?: boolean | undefined;
}

/**
 * Redis Streams transport: same stream layout, group, entry fields and delayed zset as
 * `@schally/nestjs-messenger-transport-redis`, with blocking reads, batched acks and atomic
 * delayed promotion in Rust.
 */
export declare class RedisStreamsTransport
  implements TransportInterface, ListableReceiver, MessageRetriever, MessageCountAware, HealthCheckedTransport
{
  constructor(options: RedisStreamsTransportOptions);
  /** Creates the consumer group (and the stream) if missing; get() and send() do it too. */
  setup(): Promise<void>;
  /** Resolves to the envelope with the entry id, or, for a delayed message, the member's nonce. */
  send(envelope: Envelope): Promise<Envelope>;
  get(signal: AbortSignal): AsyncIterableIterator<Envelope>;
  ack(envelope: Envelope): Promise<void>;
  reject(envelope: Envelope): Promise<void>;
  /** Stream entries (pending included); delayed messages appear once due. */
  list(limit?: number): AsyncIterableIterator<Envelope>;
  /** An entry by its stream id; `undefined` for anything else (a delayed send's nonce). */
  find(id: string): Promise<Envelope | undefined>;
  /**
   * Entries not yet delivered to the group, pending entries idle for `claimIdleMs` (claimable
   * again), and delayed messages.
   */
  getMessageCount(): Promise<number>;
  /** Counters of this instance, read synchronously. */
  stats(): TransportStats;
  /**
   * Reads the message count within `timeoutMs` (default 2000). A failure of the server or the
   * transport resolves as `down` with the error; it rejects only for an invalid `timeoutMs`.
   */
  health(options?: { timeoutMs?: number }): Promise<TransportHealth>;
  close(): Promise<void>;
}

/**
 * The SQL dialects {@link SqlTransport} speaks: upstream's two (MariaDB rides `mysql`) and
 * `sqlite`, which only this package serves.
 */
export type SqlDialect = 'postgres' | 'mysql' | 'sqlite';

/**
 * Which dialect a DSN targets, as upstream's `dialectFromDsn`: `postgres://`/`postgresql://`
 * → `'postgres'`, `mysql://`/`mariadb://` → `'mysql'`, and `sqlite:` → `'sqlite'`. Throws
 * `TransportConnectionError` for a DSN that is not a URL or has another scheme (the DSN the
 * message echoes has its password replaced by `***`).
 */
export declare function dialectFromDsn(dsn: string): SqlDialect;

/**
 * Checks a Redis DSN's shape, as upstream's `assertValidRedisDsn`: returns for `redis://` and
 * `rediss://`; throws `TransportConnectionError` for a DSN that is not a URL or has another scheme
 * (the DSN the message echoes has its password replaced by `***`).
 */
export declare function assertValidRedisDsn(dsn: string): void;

/**
 * The stable code every error raised by the transports' native side carries as `error.code`,
 * beside the core's class: `E_CONNECTION` (`TransportConnectionError`: unreachable, refused,
 * lost), `E_NOT_FOUND` (`TransportNotFoundError`: no table, stream or group), `E_INVALID_ARGUMENT`
 * (`InvalidArgumentError`), `E_CLOSED` (the transport is closing or closed), `E_BACKLOG_FULL`
 * (too much already waits to be written; nothing was stored) and `E_TRANSPORT` (any other
 * `TransportError`).
 */
export type TransportErrorCode =
  | 'E_CONNECTION'
  | 'E_NOT_FOUND'
  | 'E_INVALID_ARGUMENT'
  | 'E_CLOSED'
  | 'E_BACKLOG_FULL'
  | 'E_TRANSPORT';

/**
 * `error.cause` when a driver, the server or the network reported the failure (absent for a
 * failure of the transport's own: a bad option, a closed transport, a full backlog). Shaped as
 * the Node drivers shape theirs: `code` is PostgreSQL's SQLSTATE (`42P01`, `28P01`) as pg
 * gives it, mysql2's name (`ER_NO_SUCH_TABLE`, `ER_ACCESS_DENIED_ERROR`) with `errno` and
 * `sqlState`, better-sqlite3's `SQLITE_*` name, the Redis reply's prefix (`NOGROUP`,
 * `WRONGTYPE`, `WRONGPASS`, `NOAUTH`, `NOPERM`), or Node's socket code (`ECONNREFUSED`,
 * `ECONNRESET`, `ETIMEDOUT` also when no connection or answer came within the bound,
 * `ENOTFOUND`). `message` is the driver's own text, never holding a password.
 */
export interface TransportErrorCause extends Error {
  readonly code?: string;
  /** MySQL/MariaDB's error number. */
  readonly errno?: number;
  /** MySQL/MariaDB's SQLSTATE. */
  readonly sqlState?: string;
}

/**
 * What the errors thrown or rejected by this package's transports carry beyond the core's
 * classes (`TransportError` and its subclasses, `InvalidArgumentError`): narrow a caught error
 * to it by checking `code`.
 */
export interface TransportErrorDetails {
  readonly code: TransportErrorCode;
  readonly cause?: TransportErrorCause;
  /**
   * What the failed write did to storage: set on every rejection of `send`, `ack`, `reject`
   * and `close` (see `WriteOutcome`); on other errors when known.
   */
  readonly outcome?: WriteOutcome;
}

/**
 * What a rejected `send`, `ack`, `reject` or `close` did to storage, as `error.outcome`, so code
 * can tell a safe retry from a risky one without reading the message:
 * - `'not-applied'`: nothing of it was written (refused before it went out, or the server
 *   answered with an error): trying again stores it once.
 * - `'unknown'`: it went out and no answer came (a connection lost mid-write, no reply within
 *   the bound): it may have been applied; a retry may store a duplicate. For `close`, some
 *   acknowledgements may not have been written: those messages come back after their lease.
 */
export type WriteOutcome = 'not-applied' | 'unknown';
