// Compile-only check of the package's public declarations (index.d.ts), never executed:
//   npx tsc -p __test__/types/tsconfig.json     (npm run test:types)
// A NestJS app swaps `@schally/nestjs-messenger-transport-sql` for this package and nothing
// else changes: same class name, same options, same capabilities seen by the core.
import {
  RedisStreamsTransport,
  SqlTransport,
  TransportHealthIndicator,
  type HealthCheckedTransport,
  assertValidRedisDsn,
  dialectFromDsn,
  type SqlDialect,
  type OutboxStatement,
  type SqlTransportOptions,
  type TransportErrorCode,
  type TransportErrorDetails,
  type TransportHealth,
  type TransportStats,
  type WriteOutcome,
} from '../..';
import {
  DelayStamp,
  Envelope,
  JsonSerializer,
  ReceivedStamp,
  RedeliveryStamp,
  TransportMessageIdStamp,
  isListableReceiver,
  isMessageCountAware,
  isMessageRetriever,
  type FailureTransport,
  type ListableReceiver,
  type MessageCountAware,
  type MessageRetriever,
  type Receiver,
  type Sender,
  type Serializer,
  type TransportInterface,
} from '@schally/nestjs-messenger';
import {
  dialectFromDsn as upstreamDialectFromDsn,
  type SqlDialect as UpstreamSqlDialect,
} from '@schally/nestjs-messenger-transport-sql';
import {
  assertValidRedisDsn as upstreamAssertValidRedisDsn,
  type RedisStreamsTransportOptions as UpstreamRedisOptions,
} from '@schally/nestjs-messenger-transport-redis';
import type { RedisOptions } from 'ioredis';
import type { SqlTransportOptions as UpstreamSqlTransportOptions } from '@schally/nestjs-messenger-transport-sql';
import type { HealthCheckService as HealthCheckService10 } from 'terminus10';
import type { HealthCheckService as HealthCheckService11, HealthIndicatorService } from 'terminus11';

class OrderPlaced {
  constructor(
    readonly orderId: string,
    readonly total: number,
  ) {}
}

const serializer: Serializer = new JsonSerializer([OrderPlaced]);

// Every option, with its type.
const options: SqlTransportOptions = {
  dsn: 'postgres://postgres@127.0.0.1:5432/test',
  queueName: 'orders',
  name: 'async',
  tableName: 'messenger_messages',
  serializer,
  redeliverTimeoutSeconds: 3600,
  autoSetup: false,
  pollIntervalMs: 100,
  useNotify: true,
  getNotifyTimeoutMs: 60_000,
  connectTimeoutMs: 5_000,
  // Any LoggerService-shaped object (NestJS's Logger fits).
  logger: { log: (message: string) => void message, warn: () => undefined, error: (_message: string, context?: string) => context },
};
const transport = new SqlTransport(options);

// @ts-expect-error a logger needs log, warn and error
new SqlTransport({ dsn: 'postgres://localhost/app', logger: { log: () => undefined } });

// `false` silences a transport; no `logger` (or undefined) is the default (Nest's Logger, else
// process warnings); `true` means nothing.
new SqlTransport({ dsn: 'postgres://localhost/app', logger: false });
new RedisStreamsTransport({ dsn: 'redis://localhost:6379', stream: 'messenger:events', logger: false });
// @ts-expect-error logger is a LoggerService or false
new SqlTransport({ dsn: 'postgres://localhost/app', logger: true });

// Only the dsn is required.
const minimal: SqlTransport = new SqlTransport({ dsn: 'postgresql://localhost/app' });

// Drop-in: options written for the upstream transport are accepted as they are.
const upstreamOptions: UpstreamSqlTransportOptions = {
  dsn: 'postgres://localhost/app',
  queueName: 'orders',
  name: 'async',
  tableName: 'messenger_messages',
  serializer,
  redeliverTimeoutSeconds: 3600,
  autoSetup: true,
  pollIntervalMs: 100,
  useNotify: true,
  getNotifyTimeoutMs: 60_000,
};
const fromUpstreamOptions: SqlTransport = new SqlTransport(upstreamOptions);

// What the core sees: a transport, and every optional capability (failure transport included).
const asTransport: TransportInterface = transport;
const asSender: Sender = transport;
const asReceiver: Receiver = transport;
const asListable: ListableReceiver = transport;
const asRetriever: MessageRetriever = transport;
const asCountAware: MessageCountAware = transport;
const asFailureTransport: FailureTransport = transport;
const capabilities: [boolean, boolean, boolean] = [
  isListableReceiver(transport),
  isMessageRetriever(transport),
  isMessageCountAware(transport),
];

async function usage(signal: AbortSignal): Promise<number> {
  const setupDone: Promise<void> = transport.setup();
  await setupDone;

  const sent: Envelope = await transport.send(
    new Envelope(new OrderPlaced('o-1', 42), [new DelayStamp(1_000)]),
  );
  const sentId: string | number | undefined = sent.last(TransportMessageIdStamp)?.id;

  const deliveries: AsyncIterableIterator<Envelope> = transport.get(signal);
  for await (const envelope of deliveries) {
    const message: object = envelope.message;
    const receivedBy: string | undefined = envelope.last(ReceivedStamp)?.transportName;
    const retries: number = envelope.last(RedeliveryStamp)?.retryCount ?? 0;
    if (message instanceof OrderPlaced && receivedBy === 'async' && retries === 0) {
      const acked: Promise<void> = transport.ack(envelope);
      await acked;
    } else {
      const rejected: Promise<void> = transport.reject(envelope);
      await rejected;
    }
  }

  const listed: AsyncIterableIterator<Envelope> = transport.list();
  for await (const envelope of listed) {
    const id: string | number | undefined = envelope.last(TransportMessageIdStamp)?.id;
    if (id === undefined) throw new Error('listed envelopes carry their id');
  }
  for await (const envelope of transport.list(10)) {
    await transport.ack(envelope);
  }

  const found: Envelope | undefined = await transport.find(String(sentId));
  if (found !== undefined) {
    await transport.ack(found);
  }

  const count: number = await transport.getMessageCount();
  const stats: TransportStats = transport.stats();
  const stale: number = stats.staleSettles;
  if (stale < 0) throw new Error('a count is never negative');
  // The outbox statement goes to the app's own client, inside its transaction.
  const outbox: OutboxStatement = transport.outboxStatement(new Envelope(new OrderPlaced('o-2', 5)));
  const text: string = outbox.text;
  const values: ReadonlyArray<string | number> = outbox.values;
  const dialect: 'postgres' | 'mysql' | 'sqlite' = outbox.dialect;
  if (text.length === 0 || values.length === 0 || dialect.length === 0) throw new Error('never empty');
  const health: TransportHealth = await transport.health({ timeoutMs: 1000 });
  if (health.status === 'down' && health.details.error === undefined) throw new Error('down says why');
  const forKnex: OutboxStatement = transport.outboxStatement(new Envelope(new OrderPlaced('o-3', 1)), { placeholders: '?' });
  if (forKnex.text.includes('$1')) throw new Error('question marks only');
  // @ts-expect-error placeholders is 'native' or '?'
  transport.outboxStatement(new Envelope(new OrderPlaced('o-4', 1)), { placeholders: '$' });
  const closed: Promise<void> = transport.close();
  await closed;
  await minimal.close();
  await fromUpstreamOptions.close();
  return count;
}

// @ts-expect-error pollIntervalMs is a number of milliseconds, not a string
new SqlTransport({ dsn: 'postgres://localhost/app', pollIntervalMs: '100' });

// @ts-expect-error the dsn is required
new SqlTransport({ queueName: 'orders' });

// Through PgBouncer in transaction mode, LISTEN straight to the database.
new SqlTransport({ dsn: 'postgres://pgbouncer:6432/app?pgbouncer=true', listenDsn: 'postgres://db:5432/app' });

// @ts-expect-error listenDsn is a DSN string
new SqlTransport({ dsn: 'postgres://pgbouncer:6432/app?pgbouncer=true', listenDsn: true });
new SqlTransport({ dsn: 'postgres://db:5432/app', maxConnections: 20 });
// @ts-expect-error maxConnections is a count
new SqlTransport({ dsn: 'postgres://db:5432/app', maxConnections: '20' });
new RedisStreamsTransport({ dsn: 'redis://localhost:6379', stream: 'events', maxConnections: 5 });
// @ts-expect-error maxConnections is a count
new RedisStreamsTransport({ dsn: 'redis://localhost:6379', stream: 'events', maxConnections: '5' });

// @ts-expect-error useNotify is a boolean
new SqlTransport({ dsn: 'postgres://localhost/app', useNotify: 'yes' });

// @ts-expect-error find() takes the id as a string
void transport.find(42);

// @ts-expect-error options are readonly
options.queueName = 'other';

// Upstream's DSN exports under the same names: what code wrote against them still compiles.
function dsnChecks(): SqlDialect {
  const upstreamDialect: UpstreamSqlDialect = upstreamDialectFromDsn('postgres://localhost/db');
  const widened: SqlDialect = upstreamDialect;
  const sameRedisCheck: typeof upstreamAssertValidRedisDsn = assertValidRedisDsn;
  const nothing: void = sameRedisCheck('redis://localhost:6379');
  void nothing;
  // @ts-expect-error a DSN is a string
  dialectFromDsn(5432);
  return dialectFromDsn('sqlite://queue.db') === 'sqlite' ? widened : dialectFromDsn('mariadb://localhost/db');
}

// An app's ioredis options, typed as ioredis types them, and upstream's whole options object,
// compile as they are; keys refused at run time are refused at compile time in a literal.
function redisOptionsChecks(shared: RedisOptions, upstream: UpstreamRedisOptions): RedisStreamsTransport[] {
  const typed: RedisOptions = {
    db: 3,
    username: 'app',
    password: 'secret',
    keyPrefix: 'app:',
    connectTimeout: 2000,
    family: 4,
    lazyConnect: true,
    tls: { ca: [Buffer.from('pem')], cert: 'pem', key: 'pem', servername: 'redis.internal', rejectUnauthorized: true },
  };
  const transports = [
    new RedisStreamsTransport({ dsn: 'redis://localhost:6379', stream: 'events', redisOptions: typed }),
    new RedisStreamsTransport({ dsn: 'redis://localhost:6379', stream: 'events', redisOptions: shared }),
    new RedisStreamsTransport(upstream),
    new RedisStreamsTransport({ dsn: 'redis://localhost', stream: 'events', redisOptions: { db: 1, tls: {} } }),
  ];
  const sentinel: RedisOptions = {
    sentinels: [{ host: 'sentinel-a', port: 26379 }, { host: 'sentinel-b' }],
    name: 'mymaster',
    sentinelPassword: 'secret',
    password: 'master-secret',
  };
  transports.push(new RedisStreamsTransport({ dsn: 'redis://localhost', stream: 'events', redisOptions: sentinel, waitForReplicas: 1 }));
  // @ts-expect-error db is a number
  void new RedisStreamsTransport({ dsn: 'redis://localhost', stream: 'events', redisOptions: { db: '1' } });
  return transports;
}

// Branching on a failed send: our stable code, then the driver's code on the cause.
async function errorChecks(transport: SqlTransport): Promise<TransportErrorCode | undefined> {
  try {
    await transport.send(new Envelope({}));
    return undefined;
  } catch (caught) {
    const error = caught as Error & TransportErrorDetails;
    if (error.code === 'E_NOT_FOUND' && error.cause?.code === '42P01') await transport.setup();
    const errno: number | undefined = error.cause?.errno;
    const sqlState: string | undefined = error.cause?.sqlState;
    void [errno, sqlState];
    // @ts-expect-error not one of the stable codes
    const unknown: TransportErrorCode = 'E_SOMETHING';
    void unknown;
    // Whether a retry is safe, from a field rather than the text.
    const outcome: WriteOutcome | undefined = error.outcome;
    if (outcome === 'not-applied') await transport.send(new Envelope({}));
    // @ts-expect-error not one of the outcomes
    const other: WriteOutcome = 'applied';
    void other;
    return error.code;
  }
}

// A terminus health check over both transports (one shared type), on terminus 11 (with its
// HealthIndicatorService) and on terminus 10 (without).
async function terminusChecks(
  health10: HealthCheckService10,
  health11: HealthCheckService11,
  indicators: HealthIndicatorService,
): Promise<'up' | 'down'> {
  const orders = new SqlTransport({ dsn: 'postgres://localhost/app' });
  const events = new RedisStreamsTransport({ dsn: 'redis://localhost:6379', stream: 'events' });
  const both: HealthCheckedTransport[] = [orders, events];
  const messenger = new TransportHealthIndicator(indicators);
  const result = await health11.check([
    () => messenger.isHealthy('orders', orders),
    () => messenger.isHealthy('events', events, { timeoutMs: 1000 }),
  ]);
  const legacy = new TransportHealthIndicator();
  await health10.check(both.map((transport, i) => () => legacy.isHealthy(`transport-${i}`, transport)));
  const one = await messenger.isHealthy('orders', orders);
  const messages: number | undefined = one.orders.messages;
  void messages;
  // @ts-expect-error the key is a string
  void messenger.isHealthy(1, orders);
  // @ts-expect-error the indicator checks a transport (something with health())
  void messenger.isHealthy('orders', {});
  return result.details['orders']?.status ?? 'down';
}

export const checks = [
  dsnChecks,
  usage,
  asTransport,
  asSender,
  asReceiver,
  asListable,
  asRetriever,
  asCountAware,
  asFailureTransport,
  capabilities,
  terminusChecks,
  redisOptionsChecks,
  errorChecks,
] as const;
