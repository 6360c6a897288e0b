import type {
  Envelope,
  ListableReceiver,
  MessageCountAware,
  MessageRetriever,
  Serializer,
  TransportInterface,
} from '@schally/nestjs-messenger';

/** Options of {@link SqlTransport}: upstream's, with the same defaults, plus `connectTimeoutMs`. */
export interface SqlTransportOptions {
  /**
   * `postgres://` / `postgresql://` DSN (query parameters such as `sslmode` go to the driver).
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
  /** How long a first connection may take before `TransportConnectionError`. Default 5000. */
  readonly connectTimeoutMs?: number;
}

/**
 * Database-backed transport: same table, options and semantics as
 * `@schally/nestjs-messenger-transport-sql`, with batched claims, coalesced writes and
 * blocking idle waits in Rust.
 */
export declare class SqlTransport
  implements TransportInterface, ListableReceiver, MessageRetriever, MessageCountAware
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
  close(): Promise<void>;
}
