// Compile-only: the usage the upstream transports' READMEs show (their quick starts, with every
// option they name), written against this package's declarations. An app that swaps the import
// must compile unchanged under `strict`. The core stand-in has no Nest module, so the module's
// options are declared here as the core's contract states them (a synchronous factory or a
// transport per alias, routing by class name, retry and failure transport).
import { JsonSerializer, type TransportInterface } from '@schally/nestjs-messenger';
import { RedisStreamsTransport, SqlTransport, dialectFromDsn, assertValidRedisDsn } from '../..';

interface MessengerModuleOptions {
  readonly transports?: Record<string, TransportInterface | (() => TransportInterface)>;
  readonly routing?: Record<string, readonly string[]>;
  readonly retry?: { readonly maxRetries?: number; readonly delayMs?: number; readonly multiplier?: number; readonly maxDelayMs?: number };
  readonly failureTransport?: string;
}
declare const MessengerModule: { forRoot(options: MessengerModuleOptions): unknown };

class SendEmailMessage {
  constructor(readonly to: string) {}
}

// The SQL transport's quick start.
const serializer = new JsonSerializer([SendEmailMessage]);
MessengerModule.forRoot({
  transports: {
    async: () =>
      new SqlTransport({
        dsn: process.env['DATABASE_URL'] ?? 'postgresql://app:app@localhost:5432/app',
        name: 'async',
        queueName: 'async',
        serializer,
      }),
    failed: () =>
      new SqlTransport({
        dsn: process.env['DATABASE_URL']!,
        name: 'failed',
        queueName: 'failed',
        serializer,
      }),
  },
  routing: { [SendEmailMessage.name]: ['async'] },
  failureTransport: 'failed',
});

// The SQL transport's other options, as its README's table lists them.
new SqlTransport({
  dsn: 'mysql://app:app@localhost:3306/app',
  queueName: 'async',
  tableName: 'messenger_messages',
  redeliverTimeoutSeconds: 3600,
  autoSetup: true,
  pollIntervalMs: 1000,
  useNotify: true,
  getNotifyTimeoutMs: 60000,
  serializer,
});

// The Redis transport's quick start.
MessengerModule.forRoot({
  transports: {
    async: () =>
      new RedisStreamsTransport({
        dsn: 'redis://localhost:6379',
        name: 'async',
        stream: 'messenger:async',
        serializer: new JsonSerializer([SendEmailMessage]),
      }),
    failed: () =>
      new RedisStreamsTransport({
        dsn: 'redis://localhost:6379',
        name: 'failed',
        stream: 'messenger:failed',
        serializer: new JsonSerializer([SendEmailMessage]),
      }),
  },
  routing: { [SendEmailMessage.name]: ['async'] },
  retry: { maxRetries: 3, delayMs: 1000, multiplier: 2 },
  failureTransport: 'failed',
});

// The Redis transport's other options, as its README's table lists them.
new RedisStreamsTransport({
  dsn: 'rediss://user:secret@redis.example.com:6380/0',
  stream: 'messenger:async',
  group: 'messenger',
  consumer: 'worker-1',
  delayKey: 'messenger:async:delayed',
  claimIdleMs: 30000,
  pollIntervalMs: 50,
  readBatchSize: 10,
  cluster: false,
  serializer,
});

// The helpers both packages export.
const dialect: 'postgres' | 'mysql' | 'sqlite' = dialectFromDsn('postgresql://localhost/app');
assertValidRedisDsn('redis://localhost:6379');
void dialect;
