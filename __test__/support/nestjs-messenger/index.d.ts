// Hand-written declarations for the public surface of @schally/nestjs-messenger
// (clean-room stand-in; runtime in ./index.js).

// ---------------------------------------------------------------------------
// Stamps and envelope
// ---------------------------------------------------------------------------

/** Marker interface of envelope stamps. Stamp identity is the constructor reference. */
// eslint-disable-next-line @typescript-eslint/no-empty-interface, @typescript-eslint/no-empty-object-type
export interface Stamp {}

/** A stamp class, used as a key by `Envelope.last/all/withoutAll`. */
export type StampType<S extends Stamp = Stamp> = abstract new (...args: never[]) => S;

/** Immutable message wrapper; every "mutation" returns a new instance. */
export declare class Envelope<TMessage extends object = object> {
  private readonly stamps;
  constructor(message: TMessage, stamps?: readonly Stamp[]);
  /** Returns an Envelope as is (or `with(...stamps)`), wraps anything else. */
  static wrap<T extends object>(envelope: Envelope<T>, stamps?: readonly Stamp[]): Envelope<T>;
  static wrap<T extends object>(message: T, stamps?: readonly Stamp[]): Envelope<T>;
  /** The wrapped message (not cloned). */
  get message(): TMessage;
  /** New envelope with the stamps appended. */
  with(...stamps: Stamp[]): Envelope<TMessage>;
  /** New envelope without any stamp whose constructor is exactly `stampType`. */
  withoutAll(stampType: StampType): Envelope<TMessage>;
  /** Most recently appended stamp of exactly that class (subclasses do not match). */
  last<S extends Stamp>(stampType: StampType<S>): S | undefined;
  /** All stamps grouped by class, classes in first-seen order. */
  all(): ReadonlyMap<StampType, Stamp[]>;
  /** That class's stamps in insertion order. */
  all<S extends Stamp>(stampType: StampType<S>): S[];
}

/** Name of the bus that dispatched the message. */
export declare class BusNameStamp implements Stamp {
  readonly busName: string;
  constructor(busName: string);
}

/** The message was sent by `senderClass` under routing alias `senderAlias`. */
export declare class SentStamp implements Stamp {
  readonly senderClass: string;
  readonly senderAlias?: string | undefined;
  constructor(senderClass: string, senderAlias?: string | undefined);
}

/** Non-sendable. Added by a transport in `get()`. */
export declare class ReceivedStamp implements Stamp {
  readonly transportName: string;
  constructor(transportName: string);
}

/** Non-sendable. The transport's message id. */
export declare class TransportMessageIdStamp implements Stamp {
  readonly id: string | number;
  constructor(id: string | number);
}

/** Delivery delay. Throws `InvalidArgumentError` unless finite and >= 0. */
export declare class DelayStamp implements Stamp {
  readonly delayMs: number;
  constructor(delayMs: number);
}

/** Redelivery marker. After a JSON round-trip `redeliveredAt` is an ISO string. */
export declare class RedeliveryStamp implements Stamp {
  readonly retryCount: number;
  readonly redeliveredAt: Date;
  constructor(retryCount: number, redeliveredAt?: Date);
}

/** One per handler that succeeded. */
export declare class HandledStamp implements Stamp {
  readonly result: unknown;
  readonly handlerName: string;
  constructor(result: unknown, handlerName: string);
}

/** Details of the error that made the message fail. */
export declare class ErrorDetailsStamp implements Stamp {
  readonly exceptionClass: string;
  readonly exceptionMessage: string;
  readonly exceptionCode?: string | number | undefined;
  constructor(exceptionClass: string, exceptionMessage: string, exceptionCode?: string | number | undefined);
  /** `Error` -> (class name, message); string -> ('Error', it); else ('Error', 'Unknown error'). */
  static create(error: unknown): ErrorDetailsStamp;
}

/** Added when a message is routed to the failure transport. */
export declare class SentToFailureTransportStamp implements Stamp {
  readonly originalReceiverName: string;
  constructor(originalReceiverName: string);
}

// ---------------------------------------------------------------------------
// Serializer
// ---------------------------------------------------------------------------

export interface EncodedEnvelope {
  readonly body: string;
  readonly headers: Readonly<Record<string, string>>;
}

export interface Serializer {
  encode(envelope: Envelope): EncodedEnvelope;
  decode(encoded: EncodedEnvelope): Envelope;
}

export interface SerializableType {
  readonly name: string;
  readonly prototype: object;
  new (...args: never[]): object;
}

/**
 * JSON serializer: `body` is the message's own enumerable props, headers
 * `X-Message-Type` and `X-Message-Stamps`. Decoding never runs constructors.
 */
export declare class JsonSerializer implements Serializer {
  private readonly types;
  constructor(messageTypes?: readonly SerializableType[]);
  encode(envelope: Envelope): EncodedEnvelope;
  /** @throws SerializationError */
  decode(encoded: EncodedEnvelope): Envelope;
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/** Base of every messenger error; `name` is the concrete class name. */
export declare abstract class MessengerError extends Error {
  constructor(message: string, options?: ErrorOptions);
}
export declare class TransportError extends MessengerError {}
export declare class TransportConnectionError extends TransportError {}
export declare class TransportNotFoundError extends TransportError {}
export declare class SerializationError extends MessengerError {}
export declare class HandlerNotFoundError extends MessengerError {}
/** `Handling "<MessageClass>" failed: <cause message>`; the cause is kept in `.cause`. */
export declare class HandlerFailedError extends MessengerError {
  readonly envelope: Envelope;
  constructor(envelope: Envelope, cause: unknown);
}
export declare class InvalidArgumentError extends MessengerError {}

// ---------------------------------------------------------------------------
// Transports
// ---------------------------------------------------------------------------

export interface Sender {
  /** Persists the envelope; returns a new envelope with a TransportMessageIdStamp appended. */
  send(envelope: Envelope): Promise<Envelope>;
}

export interface Receiver {
  /** Cancellable pull; yielded envelopes carry ReceivedStamp and TransportMessageIdStamp. */
  get(signal: AbortSignal): AsyncIterable<Envelope>;
  /** Success. Idempotent. */
  ack(envelope: Envelope): Promise<void>;
  /** Failure. At most once per delivery; a no-op when the envelope is not in flight. */
  reject(envelope: Envelope): Promise<void>;
}

export interface TransportInterface extends Sender, Receiver {
  /** Releases resources; resolves only after in-flight ack/reject have settled. */
  close(): Promise<void>;
}

export interface MessageCountAware {
  getMessageCount(): Promise<number>;
}

export interface ListableReceiver {
  list(limit?: number): AsyncIterable<Envelope>;
}

export interface MessageRetriever {
  find(id: string): Promise<Envelope | undefined>;
}

export type FailureTransport = Pick<Receiver, 'ack'> & ListableReceiver & MessageRetriever;

export declare function isMessageCountAware(value: object): value is MessageCountAware;
export declare function isListableReceiver(value: object): value is ListableReceiver;
export declare function isMessageRetriever(value: object): value is MessageRetriever;

export interface SendersLocator {
  getSenders(envelope: Envelope): Iterable<readonly [alias: string, sender: Sender]>;
  getSenderByAlias(alias: string): Sender | undefined;
}

/** Routes by message class name (`message.constructor.name`); unknown aliases are skipped. */
export declare class RoutingSendersLocator implements SendersLocator {
  private readonly senders;
  private readonly routing;
  constructor(senders: ReadonlyMap<string, Sender>, routing: ReadonlyMap<string, readonly string[]>);
  getSenders(envelope: Envelope): Iterable<readonly [alias: string, sender: Sender]>;
  getSenderByAlias(alias: string): Sender | undefined;
}

export interface InMemoryTransportOptions {
  /** Name put in ReceivedStamp. Default `'in-memory'`. */
  readonly name?: string;
}

/** Process-local reference transport (ADR-007 semantics); listable, retrievable, countable. */
export declare class InMemoryTransport
  implements TransportInterface, ListableReceiver, MessageRetriever, MessageCountAware
{
  private readonly name;
  private readonly queue;
  private readonly inFlight;
  private readonly drainWaiters;
  private closing;
  private nextId;
  constructor(options?: InMemoryTransportOptions);
  send(envelope: Envelope): Promise<Envelope>;
  get(signal: AbortSignal): AsyncIterableIterator<Envelope>;
  ack(envelope: Envelope): Promise<void>;
  reject(envelope: Envelope): Promise<void>;
  close(): Promise<void>;
  getMessageCount(): Promise<number>;
  list(limit?: number): AsyncIterableIterator<Envelope>;
  find(id: string): Promise<Envelope | undefined>;
}

// ---------------------------------------------------------------------------
// Retry
// ---------------------------------------------------------------------------

export interface RetryStrategy {
  isRetryable(envelope: Envelope, error: unknown): boolean;
  getWaitingTime(envelope: Envelope, error?: unknown): number;
}

export interface MultiplierRetryStrategyOptions {
  /** Non-negative integer. Default 3. */
  readonly maxRetries?: number;
  /** >= 0. Default 1000. */
  readonly delayMs?: number;
  /** >= 1. Default 2. */
  readonly multiplier?: number;
  /** >= 0; 0 means no cap. Default 0. */
  readonly maxDelayMs?: number;
  /** Within [0, 1]. Default 0.1. */
  readonly jitter?: number;
}

/** `delayMs * multiplier^retryCount`, capped, spread by +/- jitter, rounded. */
export declare class MultiplierRetryStrategy implements RetryStrategy {
  private readonly maxRetries;
  private readonly delayMs;
  private readonly multiplier;
  private readonly maxDelayMs;
  private readonly jitter;
  /** @throws InvalidArgumentError on invalid options */
  constructor(options?: MultiplierRetryStrategyOptions);
  isRetryable(envelope: Envelope, error?: unknown): boolean;
  getWaitingTime(envelope: Envelope, error?: unknown): number;
}

// ---------------------------------------------------------------------------
// Worker
// ---------------------------------------------------------------------------

export interface WorkerLimits {
  /** Stop after this many messages (checked after each message). */
  readonly maxMessages?: number;
  /** Stop after this many milliseconds. */
  readonly maxRuntimeMs?: number;
  /** Stop when process RSS exceeds this many bytes (checked after each message). */
  readonly maxMemoryBytes?: number;
}

export interface WorkerHooks {
  /** After a successful dispatch and ack. */
  readonly onHandled?: (envelope: Envelope) => void | Promise<void>;
  /** After a failed dispatch, before the reject. */
  readonly onError?: (envelope: Envelope, error: unknown) => void | Promise<void>;
}

export interface WorkerStats {
  readonly processed: number;
}

/**
 * Sequential consume loop: dispatch, then ack (+ onHandled) or onError + reject.
 * Never closes the receiver.
 */
export declare class Worker {
  private readonly receiver;
  private readonly bus;
  private readonly limits;
  private readonly hooks;
  constructor(
    receiver: Receiver,
    bus: { dispatch(envelope: Envelope): Promise<unknown> },
    limits?: WorkerLimits,
    hooks?: WorkerHooks,
  );
  /** Runs until aborted or a limit is reached. */
  run(signal?: AbortSignal): Promise<WorkerStats>;
}
