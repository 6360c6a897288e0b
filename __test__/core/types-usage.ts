// Compile-only check of the hand-written declarations (never executed by Jest):
//   npx tsc --noEmit --strict --esModuleInterop --skipLibCheck false --types node \
//     --lib es2022 __test__/core/types-usage.ts
// Also clean with --target es2022 --module commonjs|node16|nodenext, and with
// --exactOptionalPropertyTypes --noUncheckedIndexedAccess (the upstream base config).
import {
  BusNameStamp,
  DelayStamp,
  Envelope,
  ErrorDetailsStamp,
  HandledStamp,
  HandlerFailedError,
  HandlerNotFoundError,
  InMemoryTransport,
  InvalidArgumentError,
  JsonSerializer,
  MessengerError,
  MultiplierRetryStrategy,
  ReceivedStamp,
  RedeliveryStamp,
  RoutingSendersLocator,
  SentStamp,
  SentToFailureTransportStamp,
  SerializationError,
  TransportConnectionError,
  TransportError,
  TransportMessageIdStamp,
  TransportNotFoundError,
  Worker,
  isListableReceiver,
  isMessageCountAware,
  isMessageRetriever,
  type EncodedEnvelope,
  type FailureTransport,
  type InMemoryTransportOptions,
  type ListableReceiver,
  type MessageCountAware,
  type MessageRetriever,
  type MultiplierRetryStrategyOptions,
  type Receiver,
  type RetryStrategy,
  type SerializableType,
  type Sender,
  type SendersLocator,
  type Serializer,
  type Stamp,
  type StampType,
  type TransportInterface,
  type WorkerHooks,
  type WorkerLimits,
  type WorkerStats,
} from '@schally/nestjs-messenger';
import {
  ConformanceMessage,
  runTransportConformanceTests,
  type ConformanceCapabilities,
  type ConformanceHarness,
  type TransportConformanceOptions,
} from '@schally/nestjs-messenger/testing';
import { SqlTransport } from '@schally/nestjs-messenger-transport-sql';

class OrderPlaced {
  constructor(
    public readonly id: string,
    public readonly total: number,
  ) {}
}

// Envelope and stamps -------------------------------------------------------
const envelope: Envelope<OrderPlaced> = new Envelope(new OrderPlaced('o-1', 42), [
  new BusNameStamp('default'),
]).with(
  new SentStamp('SqlTransport', 'async'),
  new SentStamp('SqlTransport'),
  new ReceivedStamp('async'),
  new TransportMessageIdStamp(7),
  new TransportMessageIdStamp('8'),
  new RedeliveryStamp(1, new Date()),
  new RedeliveryStamp(2),
  new DelayStamp(1000),
  ErrorDetailsStamp.create(new Error('boom')),
  new ErrorDetailsStamp('Error', 'boom', 'E_CODE'),
  new SentToFailureTransportStamp('async'),
  new HandledStamp({ ok: true }, 'H'),
);
const total: number = envelope.message.total;
const retryCount: number | undefined = envelope.last(RedeliveryStamp)?.retryCount;
const redeliveredAt: Date | undefined = envelope.last(RedeliveryStamp)?.redeliveredAt;
const id: string | number | undefined = envelope.last(TransportMessageIdStamp)?.id;
const alias: string | undefined = envelope.last(SentStamp)?.senderAlias;
const code: string | number | undefined = envelope.last(ErrorDetailsStamp)?.exceptionCode;
const busNames: BusNameStamp[] = envelope.all(BusNameStamp);
const grouped: ReadonlyMap<StampType, Stamp[]> = envelope.all();
const stripped: Envelope<OrderPlaced> = envelope.withoutAll(ReceivedStamp).withoutAll(TransportMessageIdStamp);
const wrapped: Envelope<OrderPlaced> = Envelope.wrap(envelope);
const wrappedMessage: Envelope<OrderPlaced> = Envelope.wrap(new OrderPlaced('o-2', 1), [new DelayStamp(5)]);
const widened: Envelope = envelope;
const stampType: StampType<DelayStamp> = DelayStamp;
// @ts-expect-error stamps are read-only
envelope.last(DelayStamp)!.delayMs = 3;
void [total, retryCount, redeliveredAt, id, alias, code, busNames, grouped, stripped, wrapped, wrappedMessage, widened, stampType];

// Serializer ---------------------------------------------------------------
const serializer: Serializer = new JsonSerializer([OrderPlaced, ConformanceMessage]);
const types: readonly SerializableType[] = [OrderPlaced];
const encoded: EncodedEnvelope = serializer.encode(envelope);
const body: string = encoded.body;
const header: string | undefined = encoded.headers['X-Message-Type'];
const decoded: Envelope = new JsonSerializer(types).decode({ body, headers: { 'X-Message-Type': header ?? '' } });
void decoded;

// Errors -------------------------------------------------------------------
const errors: MessengerError[] = [
  new TransportError('t', { cause: new Error('root') }),
  new TransportConnectionError('c'),
  new TransportNotFoundError('n'),
  new SerializationError('s'),
  new HandlerNotFoundError('h'),
  new InvalidArgumentError('i'),
  new HandlerFailedError(envelope, new Error('boom')),
];
const failed = new HandlerFailedError(envelope, 'x');
const failedEnvelope: Envelope = failed.envelope;
const cause: unknown = failed.cause;
const errorName: string = errors[0]!.name;
const transportError: TransportError = new TransportConnectionError('is a TransportError');
void [failedEnvelope, cause, errorName, transportError];
// @ts-expect-error MessengerError is abstract
new MessengerError('abstract');

// Transports, capabilities, routing ----------------------------------------
const options: InMemoryTransportOptions = { name: 'async' };
const memory = new InMemoryTransport(options);
const transport: TransportInterface = memory;
const sender: Sender = memory;
const receiver: Receiver = memory;
const countAware: MessageCountAware = memory;
const listable: ListableReceiver = memory;
const retriever: MessageRetriever = memory;
const failureTransport: FailureTransport = memory;
const sql: TransportInterface & ListableReceiver & MessageRetriever & MessageCountAware = new SqlTransport({
  dsn: 'postgresql://messenger:messenger@localhost:5432/messenger',
  serializer: new JsonSerializer([ConformanceMessage]),
});
void [sender, receiver, countAware, listable, retriever, failureTransport, sql];

async function useTransport(t: TransportInterface): Promise<void> {
  const sent: Envelope = await t.send(new Envelope(new OrderPlaced('o', 1)));
  const controller = new AbortController();
  for await (const received of t.get(controller.signal)) {
    await t.ack(received);
    await t.reject(received);
    break;
  }
  if (isListableReceiver(t)) {
    for await (const listed of t.list(10)) {
      void listed;
    }
  }
  if (isMessageRetriever(t)) {
    const found: Envelope | undefined = await t.find('1');
    void found;
  }
  if (isMessageCountAware(t)) {
    const count: number = await t.getMessageCount();
    void count;
  }
  void sent;
  await t.close();
}
void useTransport(transport);

const locator: SendersLocator = new RoutingSendersLocator(
  new Map<string, Sender>([['async', memory]]),
  new Map<string, readonly string[]>([['OrderPlaced', ['async']]]),
);
for (const [senderAlias, routed] of Array.from(locator.getSenders(envelope))) {
  void senderAlias;
  void routed.send(envelope);
}
const maybeSender: Sender | undefined = locator.getSenderByAlias('async');
void maybeSender;

// Retry --------------------------------------------------------------------
const retryOptions: MultiplierRetryStrategyOptions = { maxRetries: 3, delayMs: 1000, multiplier: 2, maxDelayMs: 0, jitter: 0.1 };
const strategy: RetryStrategy = new MultiplierRetryStrategy(retryOptions);
const retryable: boolean = strategy.isRetryable(envelope, new Error('x'));
const wait: number = new MultiplierRetryStrategy().getWaitingTime(envelope);
void [retryable, wait];

// Worker -------------------------------------------------------------------
const limits: WorkerLimits = { maxMessages: 10, maxRuntimeMs: 1000, maxMemoryBytes: 128 * 1024 * 1024 };
const hooks: WorkerHooks = {
  onHandled: (handled: Envelope) => void handled,
  onError: async (errored: Envelope, error: unknown) => void [errored, error],
};
const bus = { dispatch: async (e: Envelope): Promise<Envelope> => e };
const worker = new Worker(memory, bus, limits, hooks);
const stats: Promise<WorkerStats> = worker.run(new AbortController().signal);
void stats.then(({ processed }: { processed: number }) => processed);
void new Worker(memory, bus).run();

// Conformance (./testing) --------------------------------------------------
const capabilities: ConformanceCapabilities = { delayedDelivery: true, listable: true, messageCount: false };
const conformance: TransportConformanceOptions = {
  name: 'InMemoryTransport',
  capabilities,
  async createTransport(): Promise<ConformanceHarness> {
    const t = new InMemoryTransport();
    return { transport: t, cleanup: () => t.close() };
  },
};
const message = new ConformanceMessage('m-1');
const payload: string = message.payload;
void payload;
if (process.env['NEVER'] === 'run') {
  runTransportConformanceTests(conformance);
}
