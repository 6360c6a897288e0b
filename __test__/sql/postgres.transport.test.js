'use strict';

// SqlTransport on PostgreSQL beyond the conformance suite: options, typed errors, schema
// life cycle (autoSetup, dropped tables), poison rows, storage format, queue isolation,
// crash recovery, prefetch release, delayed redelivery, list/find/count, get()/close().

const {
  BusNameStamp,
  DelayStamp,
  InvalidArgumentError,
  MessengerError,
  ReceivedStamp,
  RedeliveryStamp,
  TransportConnectionError,
  TransportError,
  TransportMessageIdStamp,
  TransportNotFoundError,
} = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { POSTGRES_DSN, requireServer, uniqueName } = require('../support/servers');
const { pgQuery } = require('../support/pg');
const {
  TestMessage,
  serializer,
  envelopeOf,
  idOf,
  receiveUpTo,
  receiveWithin,
  receiveOne,
  pollUntil,
  settleWithin,
  closeAll,
} = require('../support/transport-helpers');

/** The table most tests share (each on its own queue); DDL tests use their own tables. */
const TABLE = uniqueName('nmn_tr');
const droppedTables = [TABLE];
const transports = [];
const queues = [];

/** A transport on TABLE (unless overridden), closed after the test. */
function transport(options = {}) {
  const queueName = options.queueName ?? uniqueName('q');
  queues.push(queueName);
  const t = new SqlTransport({
    dsn: POSTGRES_DSN,
    tableName: TABLE,
    serializer: serializer(),
    ...options,
    queueName,
  });
  transports.push(t);
  return t;
}

function freshTable(prefix) {
  const name = uniqueName(prefix);
  droppedTables.push(name);
  return name;
}

/** Acks are write-behind by default: waits (up to 2 s) until the queue has no row left. */
async function expectNoRowsEventually(table, queueName) {
  const deadline = Date.now() + 2000;
  let left = await rows(table, queueName);
  while (left.length > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 10));
    left = await rows(table, queueName);
  }
  expect(left).toHaveLength(0);
}

async function rows(table, queueName) {
  const result = await pgQuery(
    `SELECT id::text AS id, queue_name, body, headers, delivered_at FROM ${table} WHERE queue_name = $1 ORDER BY id`,
    [queueName],
  );
  return result.rows;
}

async function tableExists(table) {
  const result = await pgQuery('SELECT to_regclass($1) IS NOT NULL AS present', [table]);
  return result.rows[0].present;
}

async function collect(iterable) {
  const items = [];
  for await (const item of iterable) items.push(item);
  return items;
}

async function rejectionOf(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('expected the promise to reject');
}

function throwsSync(fn) {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected the call to throw');
}

beforeAll(async () => {
  await requireServer('postgres', POSTGRES_DSN);
  const t = new SqlTransport({ dsn: POSTGRES_DSN, tableName: TABLE });
  await t.setup();
  await t.close();
});

afterEach(async () => {
  await closeAll(transports);
  const names = queues.splice(0);
  if (names.length > 0) {
    await pgQuery(`DELETE FROM ${TABLE} WHERE queue_name = ANY($1)`, [names]);
  }
});

afterAll(async () => {
  for (const table of droppedTables) {
    await pgQuery(`DROP TABLE IF EXISTS ${table}`);
  }
});

describe('construction and options', () => {
  it('constructs with every default and closes cleanly before any use', async () => {
    const t = new SqlTransport({ dsn: POSTGRES_DSN });
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
  });

  it('opens no connection in the constructor (an unreachable DSN constructs and closes)', async () => {
    const t = new SqlTransport({ dsn: 'postgres://postgres@127.0.0.1:59999/test' });
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
  });

  it('defaults to table messenger_messages, queue "default" and the JsonSerializer wire form', async () => {
    const t = new SqlTransport({ dsn: POSTGRES_DSN });
    transports.push(t);
    const sent = await t.send(envelopeOf('defaults-1', 'p'));
    const id = idOf(sent);
    try {
      const { rows: stored } = await pgQuery(
        'SELECT queue_name, body, headers, delivered_at FROM messenger_messages WHERE id = $1::bigint',
        [id],
      );
      expect(stored).toHaveLength(1);
      expect(stored[0].queue_name).toBe('default');
      expect(stored[0].body).toBe('{"id":"defaults-1","payload":"p"}');
      expect(JSON.parse(stored[0].headers)).toEqual({ 'X-Message-Type': 'TestMessage', 'X-Message-Stamps': '[]' });
      expect(stored[0].delivered_at).toBeNull();
    } finally {
      // Ack by id (the send result carries it): deletes the row without consuming the queue.
      await t.ack(sent);
    }
    const { rows: left } = await pgQuery('SELECT 1 FROM messenger_messages WHERE id = $1::bigint', [id]);
    expect(left).toHaveLength(0);
  });

  it('creates its table on first use (autoSetup defaults to true)', async () => {
    const table = freshTable('nmn_auto');
    const t = transport({ tableName: table });
    expect(await tableExists(table)).toBe(false);
    await t.send(envelopeOf('auto-1'));
    expect(await tableExists(table)).toBe(true);
    const received = await receiveOne(t);
    await t.ack(received);
  });

  it('writes the ReceivedStamp with the queue name unless a name is given', async () => {
    const plain = transport();
    await plain.send(envelopeOf('named-1'));
    const received = await receiveOne(plain);
    const queueName = queues[queues.length - 1];
    expect(received.last(ReceivedStamp)).toEqual(new ReceivedStamp(queueName));
    await plain.ack(received);

    const named = transport({ name: 'async' });
    await named.send(envelopeOf('named-2'));
    const second = await receiveOne(named);
    expect(second.last(ReceivedStamp).transportName).toBe('async');
    await named.ack(second);
  });

  it('does not make a claimed, unsettled message claimable by others (redeliverTimeoutSeconds defaults to 3600)', async () => {
    const owner = transport();
    const queueName = queues[queues.length - 1];
    const other = transport({ queueName });
    await owner.send(envelopeOf('held-1'));
    const held = await receiveOne(owner);
    expect(await receiveWithin(other, 300)).toBeUndefined();
    expect(await other.getMessageCount()).toBe(0);
    await owner.ack(held);
  });

  it('polls at 100 ms by default when NOTIFY is off (a row inserted behind its back arrives)', async () => {
    const t = transport({ useNotify: false });
    const queueName = queues[queues.length - 1];
    const encoded = serializer().encode(envelopeOf('raw-1'));
    const consumer = receiveWithin(t, 1000);
    // A raw insert neither notifies nor wakes the process: only polling finds it.
    await pgQuery(
      `INSERT INTO ${TABLE} (queue_name, body, headers, available_at) VALUES ($1, $2, $3, now())`,
      [queueName, encoded.body, JSON.stringify(encoded.headers)],
    );
    const received = await consumer;
    expect(received?.message).toEqual(new TestMessage('raw-1'));
    await t.ack(received);
  });

  it.each([
    ['an injection attempt', 'x; DROP TABLE y'],
    ['a double quote', 'messages"'],
    ['a single quote', "messages'"],
    ['uppercase', 'Messages'],
    ['a schema-qualified name', 'public.messages'],
    ['a leading digit', '1messages'],
    ['a dash', 'messenger-messages'],
    ['a non-ASCII letter', 'tablé'],
    ['49 characters', 'a'.repeat(49)],
    ['the empty string', ''],
  ])('rejects a tableName with %s as InvalidArgumentError', (_, tableName) => {
    const error = throwsSync(() => new SqlTransport({ dsn: POSTGRES_DSN, tableName }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toBeInstanceOf(MessengerError);
    expect(error).not.toBeInstanceOf(TransportError);
    expect(error.message).toMatch(/table ?name/i);
  });

  it('accepts the longest and the shortest valid table names', async () => {
    for (const tableName of ['a'.repeat(48), '_']) {
      const t = new SqlTransport({ dsn: POSTGRES_DSN, tableName });
      await t.close();
    }
  });

  it.each([
    ['empty', ''],
    ['191 characters long', 'q'.repeat(191)],
  ])('rejects a queueName that is %s as InvalidArgumentError', (_, queueName) => {
    const error = throwsSync(() => new SqlTransport({ dsn: POSTGRES_DSN, queueName }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toMatch(/queue ?name/i);
  });

  it('accepts a 190-character queue name end to end', async () => {
    const queueName = `${uniqueName('q')}_`.padEnd(190, 'x');
    expect(queueName).toHaveLength(190);
    const t = transport({ queueName });
    await t.send(envelopeOf('long-queue'));
    const received = await receiveOne(t);
    expect(received.message).toEqual(new TestMessage('long-queue'));
    await t.ack(received);
  });

  it.each([
    ['pollIntervalMs', -1],
    ['pollIntervalMs', Number.NaN],
    ['redeliverTimeoutSeconds', -1],
    ['redeliverTimeoutSeconds', Number.NaN],
    ['getNotifyTimeoutMs', -5],
    ['connectTimeoutMs', Number.NaN],
  ])('rejects %s = %p as InvalidArgumentError', (option, value) => {
    const error = throwsSync(() => new SqlTransport({ dsn: POSTGRES_DSN, [option]: value }));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.message).toContain(option);
  });

  it('rejects options that are not an object as InvalidArgumentError', () => {
    expect(throwsSync(() => new SqlTransport(null))).toBeInstanceOf(InvalidArgumentError);
    expect(throwsSync(() => new SqlTransport(undefined))).toBeInstanceOf(InvalidArgumentError);
  });

  it('rejects the PostgreSQL-only options for a mysql DSN as InvalidArgumentError', () => {
    for (const extra of [{ useNotify: false }, { getNotifyTimeoutMs: 1000 }]) {
      const error = throwsSync(() => new SqlTransport({ dsn: 'mysql://root@127.0.0.1:3306/test', ...extra }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
    }
  });

  it.each([
    ['a malformed DSN', 'not a dsn'],
    ['an empty DSN', ''],
    ['a missing DSN', undefined],
    ['a host that is not a URL', 'postgres://u:p@[bad'],
  ])('rejects %s as TransportConnectionError', (_, dsn) => {
    const error = throwsSync(() => new SqlTransport({ dsn }));
    expect(error).toBeInstanceOf(TransportConnectionError);
  });

  it.each([
    ['http://localhost/x'],
    ['redis://127.0.0.1:6379'],
    ['mongodb://localhost/test'],
  ])('rejects the unsupported scheme of %s as TransportConnectionError naming the supported ones', (dsn) => {
    const error = throwsSync(() => new SqlTransport({ dsn }));
    expect(error).toBeInstanceOf(TransportConnectionError);
    for (const scheme of ['postgres://', 'postgresql://', 'mysql://', 'mariadb://']) {
      expect(error.message).toContain(scheme);
    }
  });
});

describe('misuse and close()', () => {
  const MISSING_ID = 'Cannot ack or reject an envelope without a TransportMessageIdStamp.';

  it('throws TransportError when acking or rejecting an envelope without a TransportMessageIdStamp', async () => {
    const t = transport();
    const ackError = await rejectionOf(t.ack(envelopeOf('no-id')));
    expect(ackError).toBeInstanceOf(TransportError);
    expect(ackError.message).toBe(MISSING_ID);
    const rejectError = await rejectionOf(t.reject(envelopeOf('no-id')));
    expect(rejectError).toBeInstanceOf(TransportError);
    expect(rejectError.message).toBe(MISSING_ID);
  });

  it('refuses to send once closed', async () => {
    const t = transport();
    await t.close();
    const error = await rejectionOf(t.send(envelopeOf('late')));
    expect(error).toBeInstanceOf(TransportError);
    expect(error.message).toBe('Cannot send on a SQL transport that is closing or closed.');
    await expectNoRowsEventually(TABLE, queues[queues.length - 1]);
  });

  it('refuses to send while close() waits for an in-flight message', async () => {
    const t = transport();
    await t.send(envelopeOf('in-flight'));
    const received = await receiveOne(t);
    const closing = t.close();
    const error = await rejectionOf(t.send(envelopeOf('late')));
    expect(error).toBeInstanceOf(TransportError);
    expect(error.message).toBe('Cannot send on a SQL transport that is closing or closed.');
    await t.ack(received);
    expect(await settleWithin(closing, 3000)).toEqual({ value: undefined });
  });

  it('close() is idempotent, and get() after close() ends at once without yielding', async () => {
    const t = transport();
    await t.send(envelopeOf('left-behind'));
    await Promise.all([t.close(), t.close()]);
    await t.close();
    const iterator = t.get(new AbortController().signal);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });
    const [row] = await rows(TABLE, queues[queues.length - 1]);
    expect(row.delivered_at).toBeNull();
  });
});

describe('schema life cycle', () => {
  it('with autoSetup disabled fails typed (NotFound) until setup() creates the table', async () => {
    const table = freshTable('nmn_nosetup');
    const t = transport({ tableName: table, autoSetup: false });

    const sendError = await rejectionOf(t.send(envelopeOf('early')));
    expect(sendError).toBeInstanceOf(TransportNotFoundError);
    expect(sendError.message).toContain(table);

    const getError = await rejectionOf(t.get(new AbortController().signal).next());
    expect(getError).toBeInstanceOf(TransportNotFoundError);

    expect(await rejectionOf(collect(t.list()))).toBeInstanceOf(TransportNotFoundError);
    expect(await rejectionOf(t.find('1'))).toBeInstanceOf(TransportNotFoundError);
    expect(await rejectionOf(t.getMessageCount())).toBeInstanceOf(TransportNotFoundError);
    expect(await tableExists(table)).toBe(false);

    await t.setup();
    await t.setup();

    const { rows: columns } = await pgQuery(
      `SELECT column_name, data_type, is_nullable FROM information_schema.columns
        WHERE table_name = $1 ORDER BY ordinal_position`,
      [table],
    );
    expect(columns.map((c) => [c.column_name, c.data_type, c.is_nullable])).toEqual([
      ['id', 'bigint', 'NO'],
      ['body', 'text', 'NO'],
      ['headers', 'text', 'NO'],
      ['queue_name', 'character varying', 'NO'],
      ['created_at', 'timestamp with time zone', 'NO'],
      ['available_at', 'timestamp with time zone', 'NO'],
      ['delivered_at', 'timestamp with time zone', 'YES'],
    ]);
    const { rows: indexes } = await pgQuery('SELECT indexdef FROM pg_indexes WHERE indexname = $1', [
      `${table}_claim_idx`,
    ]);
    expect(indexes).toHaveLength(1);
    expect(indexes[0].indexdef).toContain('(queue_name, available_at, delivered_at, id)');

    const sent = await t.send(envelopeOf('after-setup'));
    const received = await receiveOne(t);
    expect(idOf(received)).toBe(idOf(sent));
    await t.ack(received);
    expect(await t.getMessageCount()).toBe(0);
  });

  it('setup() re-creates a table dropped under a live instance, which then acks the reused id 1 (ADR-007 regression)', async () => {
    const table = freshTable('nmn_adr7');
    const t = transport({ tableName: table });
    const queueName = queues[queues.length - 1];

    expect(idOf(await t.send(envelopeOf('before-drop')))).toBe('1');
    const first = await receiveOne(t);
    expect(idOf(first)).toBe('1');
    await t.ack(first);

    await pgQuery(`DROP TABLE ${table}`);
    await t.setup();

    expect(idOf(await t.send(envelopeOf('after-drop')))).toBe('1');
    const again = await receiveOne(t);
    expect(idOf(again)).toBe('1');
    expect(again.message).toEqual(new TestMessage('after-drop'));
    await t.ack(again);
    await expectNoRowsEventually(table, queueName);

    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
  });

  it('with autoSetup, a send after the table vanished fails once with TransportNotFoundError, then heals by itself', async () => {
    const table = freshTable('nmn_heal');
    const t = transport({ tableName: table });
    const queueName = queues[queues.length - 1];
    const first = await t.send(envelopeOf('before-drop'));
    const received = await receiveOne(t);
    expect(idOf(received)).toBe(idOf(first));
    await t.ack(received);

    await pgQuery(`DROP TABLE ${table}`);

    const error = await rejectionOf(t.send(envelopeOf('lost')));
    expect(error).toBeInstanceOf(TransportNotFoundError);

    const healed = await t.send(envelopeOf('healed'));
    expect(idOf(healed)).toBe('1');
    const again = await receiveOne(t);
    expect(idOf(again)).toBe('1');
    expect(again.message).toEqual(new TestMessage('healed'));
    await t.ack(again);
    await expectNoRowsEventually(table, queueName);
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
  });

  it('with autoSetup, a consumer whose table vanished gets TransportNotFoundError once; the next get() heals', async () => {
    const table = freshTable('nmn_healget');
    const t = transport({ tableName: table });
    await t.send(envelopeOf('before-drop'));
    await t.ack(await receiveOne(t));

    await pgQuery(`DROP TABLE ${table}`);

    const error = await rejectionOf(receiveWithin(t, 2000));
    expect(error).toBeInstanceOf(TransportNotFoundError);

    expect(await receiveWithin(t, 100)).toBeUndefined();
    expect(await tableExists(table)).toBe(true);
    await t.send(envelopeOf('healed'));
    const again = await receiveOne(t);
    expect(idOf(again)).toBe('1');
    await t.ack(again);
  });

  it('maps a reject once the table vanished to TransportNotFoundError without hanging close()', async () => {
    const table = freshTable('nmn_rejgone');
    const t = transport({ tableName: table });
    await t.send(envelopeOf('doomed'));
    const received = await receiveOne(t);

    await pgQuery(`DROP TABLE ${table}`);

    const error = await rejectionOf(t.reject(received));
    expect(error).toBeInstanceOf(TransportNotFoundError);
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
  });
});

describe('poison rows', () => {
  const typed = (type, stamps = '[]') => JSON.stringify({ 'X-Message-Type': type, 'X-Message-Stamps': stamps });

  async function insertPoison(queueName) {
    const poison = [
      ['{"id":"p1"}', 'not-json'],
      ['{"id":"ghost"}', typed('GhostMessage')],
      ['[1,2,3]', typed('TestMessage')],
      ['{"id":"p4"}', '"just a string"'],
      ['{"id":"p5"}', 'null'],
      ['{"id":"p6"}', '[]'],
      ['{"id":"p7"}', typed('TestMessage', '[{"type":"GhostStamp","data":{}}]')],
      ['{"id":"p8"}', typed('TestMessage', '{}')],
      ['{"id":"p9"}', JSON.stringify({ 'X-Message-Stamps': '[]' })],
      ['not json at all', typed('TestMessage')],
    ];
    for (const [body, headers] of poison) {
      await pgQuery(
        `INSERT INTO ${TABLE} (queue_name, body, headers, available_at) VALUES ($1, $2, $3, now())`,
        [queueName, body, headers],
      );
    }
    return poison.length;
  }

  it('discards undecodable and foreign rows instead of looping, and delivers the good one', async () => {
    const t = transport();
    const queueName = queues[queues.length - 1];
    const poisonCount = await insertPoison(queueName);
    const good = await t.send(envelopeOf('good'));
    expect(await rows(TABLE, queueName)).toHaveLength(poisonCount + 1);

    const received = await receiveUpTo(t, 2, 700);
    expect(received).toHaveLength(1);
    expect(received[0].message).toEqual(new TestMessage('good'));
    expect(idOf(received[0])).toBe(idOf(good));

    const remaining = await pollUntil(
      async () => {
        const left = await rows(TABLE, queueName);
        return left.length === 1 ? left : undefined;
      },
      { timeoutMs: 1000 },
    );
    expect(remaining?.map((r) => r.id)).toEqual([idOf(good)]);

    await t.ack(received[0]);
    await expectNoRowsEventually(TABLE, queueName);
  });

  it('list() and find() skip undecodable rows without deleting them', async () => {
    const t = transport();
    const queueName = queues[queues.length - 1];
    const poisonCount = await insertPoison(queueName);
    const good = await t.send(envelopeOf('good'));

    const listed = await collect(t.list());
    expect(listed.map(idOf)).toEqual([idOf(good)]);
    expect(listed[0].message).toEqual(new TestMessage('good'));

    const stored = await rows(TABLE, queueName);
    expect(stored).toHaveLength(poisonCount + 1);
    for (const row of stored.filter((r) => r.id !== idOf(good))) {
      expect(await t.find(row.id)).toBeUndefined();
    }
    expect(await rows(TABLE, queueName)).toHaveLength(poisonCount + 1);
    expect(stored.every((r) => r.delivered_at === null)).toBe(true);
  });
});

describe('payloads and storage format', () => {
  it('round-trips a 1 MB body intact, stored byte for byte', async () => {
    const t = transport();
    const unit = 'abcdefghij\u00e9\u4e2d\ud83c\udf89"\\\n';
    const payload = unit.repeat(Math.ceil((1024 * 1024) / unit.length)).slice(0, 1024 * 1024);
    const envelope = envelopeOf('big', payload);
    const sent = await t.send(envelope);

    const { rows: stored } = await pgQuery(`SELECT body FROM ${TABLE} WHERE id = $1::bigint`, [idOf(sent)]);
    expect(stored[0].body).toBe(serializer().encode(envelope).body);

    const received = await receiveOne(t);
    expect(received.message.payload.length).toBe(payload.length);
    expect(received.message.payload === payload).toBe(true);
    const found = await t.find(idOf(sent));
    expect(found.message.payload === payload).toBe(true);
    await t.ack(received);
  });

  it('round-trips special characters in bodies, stamps and queue names', async () => {
    const nasty = [
      'emoji 🎉👍🏽',
      'quotes " \' `',
      'escapes \n \t \r \\ \\n',
      'NUL \u0000 and lone surrogate \ud800',
      'CJK 中文 日本語 한국어, RTL עברית العربية',
      'line separators \u2028 \u2029',
      "SQL '; DROP TABLE messenger_messages; -- $1 $$ %s",
    ].join(' | ');
    const queueName = `${uniqueName('q')} '"; DROP TABLE x; -- 🎉 中文`;
    const t = transport({ queueName });
    const sent = await t.send(envelopeOf(nasty, nasty, [new BusNameStamp(nasty)]));

    expect((await collect(t.list())).map(idOf)).toEqual([idOf(sent)]);
    expect(await t.getMessageCount()).toBe(1);
    const received = await receiveOne(t);
    expect(received.message).toEqual(new TestMessage(nasty, nasty));
    expect(received.last(BusNameStamp)).toEqual(new BusNameStamp(nasty));
    const { rows: stored } = await pgQuery(`SELECT queue_name FROM ${TABLE} WHERE id = $1::bigint`, [
      idOf(sent),
    ]);
    expect(stored[0].queue_name).toBe(queueName);
    await t.ack(received);
    expect(await t.getMessageCount()).toBe(0);
  });

  it('stores exactly the upstream row format (body, double-encoded headers, DB-clock delay)', async () => {
    const t = transport();
    const queueName = queues[queues.length - 1];
    const redeliveredAt = new Date('2026-01-02T03:04:05.678Z');
    const envelope = envelopeOf('fmt-1', 'payload', [
      new BusNameStamp('command.bus'),
      new RedeliveryStamp(2, redeliveredAt),
      new DelayStamp(60000),
      // Non-sendable: never stored.
      new ReceivedStamp('elsewhere'),
      new TransportMessageIdStamp('999'),
    ]);
    const sent = await t.send(envelope);

    expect(idOf(sent)).toMatch(/^[1-9]\d*$/);
    expect(typeof sent.last(TransportMessageIdStamp).id).toBe('string');
    expect(sent.message).toBe(envelope.message);
    expect(sent.last(DelayStamp)).toEqual(new DelayStamp(60000));

    const { rows: stored } = await pgQuery(
      `SELECT id::text AS id, queue_name, body, headers, delivered_at,
              (extract(epoch FROM available_at - created_at) * 1000)::float8 AS delay_ms
         FROM ${TABLE} WHERE queue_name = $1`,
      [queueName],
    );
    expect(stored).toHaveLength(1);
    const [row] = stored;
    expect(row.id).toBe(idOf(sent));
    expect(row.queue_name).toBe(queueName);
    expect(row.delivered_at).toBeNull();
    expect(row.body).toBe('{"id":"fmt-1","payload":"payload"}');
    expect(row.headers).toBe(
      '{"X-Message-Type":"TestMessage","X-Message-Stamps":"[' +
        '{\\"type\\":\\"BusNameStamp\\",\\"data\\":{\\"busName\\":\\"command.bus\\"}},' +
        '{\\"type\\":\\"RedeliveryStamp\\",\\"data\\":{\\"retryCount\\":2,\\"redeliveredAt\\":\\"2026-01-02T03:04:05.678Z\\"}},' +
        '{\\"type\\":\\"DelayStamp\\",\\"data\\":{\\"delayMs\\":60000}}]"}',
    );
    const encoded = serializer().encode(envelope);
    expect(row.body).toBe(encoded.body);
    expect(row.headers).toBe(JSON.stringify(encoded.headers));
    expect(row.delay_ms).toBeGreaterThanOrEqual(59999);
    expect(row.delay_ms).toBeLessThanOrEqual(60001);

    // Not due: counted out, listed in, and deleted by an ack of the send result.
    expect(await t.getMessageCount()).toBe(0);
    expect((await collect(t.list())).map(idOf)).toEqual([idOf(sent)]);
    await t.ack(sent);
    await expectNoRowsEventually(TABLE, queueName);
  });

  it('decodes rows written in the upstream form by another writer', async () => {
    const t = transport();
    const queueName = queues[queues.length - 1];
    const encoded = serializer().encode(envelopeOf('foreign-1', 'x', [new RedeliveryStamp(3, new Date(0))]));
    await pgQuery(
      `INSERT INTO ${TABLE} (queue_name, body, headers, available_at) VALUES ($1, $2, $3, now())`,
      [queueName, encoded.body, JSON.stringify(encoded.headers)],
    );
    const received = await receiveOne(t);
    expect(received.message).toEqual(new TestMessage('foreign-1', 'x'));
    expect(received.last(RedeliveryStamp).retryCount).toBe(3);
    expect(received.last(RedeliveryStamp).redeliveredAt).toBe('1970-01-01T00:00:00.000Z');
    await t.ack(received);
  });
});

describe('queues of one table', () => {
  it('keeps two queues of one table apart (get, list, count)', async () => {
    const a = transport();
    const b = transport();
    const sentA = [];
    const sentB = [];
    for (let i = 0; i < 3; i += 1) sentA.push(idOf(await a.send(envelopeOf(`a-${i}`))));
    for (let i = 0; i < 2; i += 1) sentB.push(idOf(await b.send(envelopeOf(`b-${i}`))));

    expect(await a.getMessageCount()).toBe(3);
    expect(await b.getMessageCount()).toBe(2);
    expect((await collect(a.list())).map(idOf)).toEqual(sentA);
    expect((await collect(b.list())).map(idOf)).toEqual(sentB);

    const gotA = await receiveUpTo(a, 4, 700);
    expect(gotA.map(idOf)).toEqual(sentA);
    expect(gotA.map((e) => e.message.id)).toEqual(['a-0', 'a-1', 'a-2']);
    for (const e of gotA) await a.ack(e);
    expect(await b.getMessageCount()).toBe(2);

    const gotB = await receiveUpTo(b, 3, 700);
    expect(gotB.map(idOf)).toEqual(sentB);
    for (const e of gotB) await b.ack(e);

    expect(await a.getMessageCount()).toBe(0);
    expect(await b.getMessageCount()).toBe(0);
  });
});

describe('crash recovery and prefetch', () => {
  it('redelivers a message left in flight beyond redeliverTimeoutSeconds (same id, no RedeliveryStamp)', async () => {
    const crashed = transport();
    const queueName = queues[queues.length - 1];
    const reaper = transport({ queueName, redeliverTimeoutSeconds: 0 });
    const sent = await crashed.send(envelopeOf('orphan', 'data'));
    const first = await receiveOne(crashed);
    expect(idOf(first)).toBe(idOf(sent));

    // delivered_at has millisecond precision: let the DB clock move past it.
    const stale = await pollUntil(
      async () =>
        (
          await pgQuery(`SELECT delivered_at < now() AS stale FROM ${TABLE} WHERE id = $1::bigint`, [
            idOf(first),
          ])
        ).rows[0]?.stale,
      { timeoutMs: 1000 },
    );
    expect(stale).toBe(true);

    const second = await receiveOne(reaper);
    expect(idOf(second)).toBe(idOf(first));
    expect(second.message).toEqual(new TestMessage('orphan', 'data'));
    expect(second.last(RedeliveryStamp)).toBeUndefined();
    await reaper.ack(second);
    await expectNoRowsEventually(TABLE, queueName);

    // The "crashed" instance's late ack is a harmless no-op, and lets it close.
    await crashed.ack(first);
  });

  it('releases prefetched rows as soon as the get() loop is left', async () => {
    const t = transport();
    const queueName = queues[queues.length - 1];
    const ids = [];
    for (let i = 0; i < 5; i += 1) ids.push(idOf(await t.send(envelopeOf(`pf-${i}`))));

    let first;
    for await (const envelope of t.get(new AbortController().signal)) {
      first = envelope;
      break;
    }
    expect(idOf(first)).toBe(ids[0]);

    const released = await pollUntil(
      async () => {
        const stored = await rows(TABLE, queueName);
        const others = stored.filter((r) => r.id !== ids[0]);
        return others.length === 4 && others.every((r) => r.delivered_at === null);
      },
      { timeoutMs: 1000 },
    );
    expect(released).toBe(true);
    const [firstRow] = (await rows(TABLE, queueName)).filter((r) => r.id === ids[0]);
    expect(firstRow.delivered_at).not.toBeNull();

    const other = transport({ queueName });
    const rest = await receiveUpTo(other, 4, 2000);
    expect(rest.map(idOf)).toEqual(ids.slice(1));
    for (const e of rest) await other.ack(e);
    await t.ack(first);
    await expectNoRowsEventually(TABLE, queueName);
  });

  it('releases prefetched rows on close()', async () => {
    const t = transport();
    const queueName = queues[queues.length - 1];
    const ids = [];
    for (let i = 0; i < 5; i += 1) ids.push(idOf(await t.send(envelopeOf(`pfc-${i}`))));

    const iterator = t.get(new AbortController().signal);
    const { value: first } = await iterator.next();
    expect(idOf(first)).toBe(ids[0]);
    await t.ack(first);
    await t.close();

    const stored = await rows(TABLE, queueName);
    expect(stored.map((r) => r.id)).toEqual(ids.slice(1));
    expect(stored.every((r) => r.delivered_at === null)).toBe(true);
    expect(await iterator.next()).toEqual({ value: undefined, done: true });

    const other = transport({ queueName });
    const rest = await receiveUpTo(other, 4, 2000);
    expect(rest.map(idOf)).toEqual(ids.slice(1));
    for (const e of rest) await other.ack(e);
  });
});

describe('reject and redelivery', () => {
  it('re-applies the DelayStamp of a rejected message to its copy (new id, RedeliveryStamp 1)', async () => {
    const t = transport();
    const queueName = queues[queues.length - 1];
    const sent = await t.send(envelopeOf('delayed', 'd', [new DelayStamp(300)]));
    const first = await receiveOne(t, 3000);
    expect(idOf(first)).toBe(idOf(sent));

    const rejectedAt = Date.now();
    await t.reject(first);
    const copy = await receiveOne(t, 3000);
    const elapsed = Date.now() - rejectedAt;

    expect(elapsed).toBeGreaterThanOrEqual(250);
    expect(idOf(copy)).not.toBe(idOf(first));
    expect(copy.message).toEqual(new TestMessage('delayed', 'd'));
    expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
    expect(copy.last(DelayStamp)).toEqual(new DelayStamp(300));
    expect((await rows(TABLE, queueName)).map((r) => r.id)).toEqual([idOf(copy)]);
    await t.ack(copy);
  });

  it('round-trips, including a redelivery, with useNotify disabled', async () => {
    const t = transport({ useNotify: false });
    const sent = await t.send(envelopeOf('quiet'));
    const first = await receiveOne(t);
    expect(idOf(first)).toBe(idOf(sent));
    await t.reject(first);
    const second = await receiveOne(t);
    expect(idOf(second)).not.toBe(idOf(first));
    expect(second.last(RedeliveryStamp).retryCount).toBe(1);
    await t.reject(second);
    const third = await receiveOne(t);
    expect(third.last(RedeliveryStamp).retryCount).toBe(2);
    await t.ack(third);
    expect(await collect(t.list())).toEqual([]);
  });
});

describe('list, find and getMessageCount', () => {
  it('lists, finds and counts without consuming; an ack of a found message deletes it', async () => {
    const a = transport();
    const b = transport();
    const m1 = idOf(await a.send(envelopeOf('m1')));
    const inFlight = await receiveOne(a);
    expect(idOf(inFlight)).toBe(m1);
    const m2 = idOf(await a.send(envelopeOf('m2', '', [new DelayStamp(60000)])));
    const m3 = idOf(await a.send(envelopeOf('m3')));
    const m4 = idOf(await b.send(envelopeOf('m4')));

    const listed = await collect(a.list());
    expect(listed.map(idOf)).toEqual([m1, m3, m2]);
    expect(listed.map((e) => e.message.id)).toEqual(['m1', 'm3', 'm2']);
    expect(listed.every((e) => e.last(ReceivedStamp) === undefined)).toBe(true);
    expect((await collect(a.list(2))).map(idOf)).toEqual([m1, m3]);
    expect((await collect(b.list())).map(idOf)).toEqual([m4]);

    // Due and not in flight: m3 only (m1 is in flight, m2 is delayed).
    expect(await a.getMessageCount()).toBe(1);
    expect(await b.getMessageCount()).toBe(1);

    // find() sees every queue of the table.
    const foreign = await a.find(m4);
    expect(foreign.message).toEqual(new TestMessage('m4'));
    expect(idOf(foreign)).toBe(m4);
    const delayed = await a.find(m2);
    expect(delayed.last(DelayStamp)).toEqual(new DelayStamp(60000));
    for (const id of ['abc', '99999999999999999999', '0', '-1', '', '1.5', ' 1']) {
      expect(await a.find(id)).toBeUndefined();
    }

    await a.ack(delayed);
    expect(await a.find(m2)).toBeUndefined();
    expect((await collect(a.list())).map(idOf)).toEqual([m1, m3]);

    // Nothing above consumed anything.
    const next = await receiveOne(a);
    expect(idOf(next)).toBe(m3);
    await a.ack(next);
    await a.ack(inFlight);
    const other = await receiveOne(b);
    expect(idOf(other)).toBe(m4);
    await b.ack(other);
    expect(await a.getMessageCount()).toBe(0);
    expect(await collect(a.list())).toEqual([]);
  });

  it('lists 100 messages by default and honours an explicit limit', async () => {
    const t = transport();
    const queueName = queues[queues.length - 1];
    const encoded = serializer().encode(envelopeOf('template'));
    await pgQuery(
      `INSERT INTO ${TABLE} (queue_name, body, headers, available_at)
       SELECT $1, format('{"id":"bulk-%s","payload":""}', g), $2, now() + g * interval '1 millisecond'
         FROM generate_series(1, 105) AS g`,
      [queueName, JSON.stringify(encoded.headers)],
    );
    const all = await collect(t.list());
    expect(all).toHaveLength(100);
    expect(all.map((e) => e.message.id)).toEqual(Array.from({ length: 100 }, (_, i) => `bulk-${i + 1}`));
    expect((await collect(t.list(3))).map((e) => e.message.id)).toEqual(['bulk-1', 'bulk-2', 'bulk-3']);
    expect(await collect(t.list(500))).toHaveLength(105);
  });
});

describe('FIFO order', () => {
  // Rows written by one statement share available_at (one now()), which the native batch
  // insert makes common; the tie must then break on the numeric id, as upstream's claim does.
  async function insertTied(table, queueName, count) {
    const encoded = serializer().encode(envelopeOf('template'));
    await pgQuery(
      `INSERT INTO ${table} (queue_name, body, headers, available_at)
       SELECT $1, format('{"id":"f-%s","payload":""}', g), $2, now() FROM generate_series(1, $3::int) AS g`,
      [queueName, JSON.stringify(encoded.headers), count],
    );
    return Array.from({ length: count }, (_, i) => String(i + 1));
  }

  it('claims rows with equal available_at in numeric id order across a digit boundary', async () => {
    const table = freshTable('nmn_fifo');
    const t = transport({ tableName: table });
    await t.setup();
    const expected = await insertTied(table, queues[queues.length - 1], 12);

    const received = await receiveUpTo(t, 12, 2000);
    for (const e of received) await t.ack(e);
    expect(received.map(idOf)).toEqual(expected);
    expect(received.map((e) => e.message.id)).toEqual(expected.map((id) => `f-${id}`));
  });

  it('maps each concurrently sent message (batched INSERTs) to its own id, and delivers them in id order', async () => {
    const table = freshTable('nmn_fifo');
    const t = transport({ tableName: table });
    await t.setup();
    const sent = await Promise.all(Array.from({ length: 15 }, (_, i) => t.send(envelopeOf(`c-${i}`))));
    const idByMessage = new Map(sent.map((e) => [e.message.id, idOf(e)]));
    expect(new Set(idByMessage.values()).size).toBe(15);

    const { rows: stored } = await pgQuery(`SELECT id::text AS id, body FROM ${table}`);
    for (const row of stored) {
      expect(idByMessage.get(JSON.parse(row.body).id)).toBe(row.id);
    }

    const received = await receiveUpTo(t, 15, 2000);
    for (const e of received) await t.ack(e);
    const receivedIds = received.map(idOf);
    expect(receivedIds).toEqual([...idByMessage.values()].sort((a, b) => Number(a) - Number(b)));
    for (const e of received) expect(idOf(e)).toBe(idByMessage.get(e.message.id));
  });

  it('lists rows with equal available_at in numeric id order across a digit boundary', async () => {
    const table = freshTable('nmn_fifo');
    const t = transport({ tableName: table });
    await t.setup();
    const expected = await insertTied(table, queues[queues.length - 1], 12);

    expect((await collect(t.list())).map(idOf)).toEqual(expected);
    expect((await collect(t.list(3))).map(idOf)).toEqual(['1', '2', '3']);
  });
});

describe('get() and close()', () => {
  it('get() with an already-aborted signal returns at once and claims nothing', async () => {
    const t = transport();
    const queueName = queues[queues.length - 1];
    await t.send(envelopeOf('untouched'));
    const iterator = t.get(AbortSignal.abort());
    expect(await settleWithin(iterator.next(), 500)).toEqual({ value: { value: undefined, done: true } });
    const [row] = await rows(TABLE, queueName);
    expect(row.delivered_at).toBeNull();
    expect(await t.getMessageCount()).toBe(1);
  });

  it('close() ends a consumer blocked on an idle wait promptly, without throwing', async () => {
    const t = transport({ pollIntervalMs: 60000, getNotifyTimeoutMs: 60000 });
    const yielded = [];
    const consumer = (async () => {
      for await (const envelope of t.get(new AbortController().signal)) yielded.push(envelope);
      return 'ended';
    })();
    // Once the table has been set up and counted, the consumer has had its empty claim.
    expect(await t.getMessageCount()).toBe(0);
    expect(await settleWithin(consumer, 200)).toBe('timeout');

    const started = Date.now();
    const closed = t.close();
    expect(await settleWithin(consumer, 1000)).toEqual({ value: 'ended' });
    expect(Date.now() - started).toBeLessThan(1000);
    expect(await settleWithin(closed, 2000)).toEqual({ value: undefined });
    expect(yielded).toEqual([]);
  });

  it('aborting the signal ends a consumer blocked on an idle wait promptly', async () => {
    const t = transport({ pollIntervalMs: 60000, getNotifyTimeoutMs: 60000 });
    const controller = new AbortController();
    const consumer = (async () => {
      for await (const envelope of t.get(controller.signal)) void envelope;
      return 'ended';
    })();
    expect(await t.getMessageCount()).toBe(0);
    expect(await settleWithin(consumer, 200)).toBe('timeout');
    controller.abort();
    expect(await settleWithin(consumer, 1000)).toEqual({ value: 'ended' });
  });

  it('accepts ack and reject after the get() iterator was disposed', async () => {
    const t = transport();
    const queueName = queues[queues.length - 1];
    await t.send(envelopeOf('late-settle'));
    let first;
    for await (const envelope of t.get(new AbortController().signal)) {
      first = envelope;
      break;
    }
    await t.reject(first);
    // A second reject of the same delivery stays a no-op after disposal too.
    await t.reject(first);
    const stored = await rows(TABLE, queueName);
    expect(stored).toHaveLength(1);
    expect(stored[0].id).not.toBe(idOf(first));

    let copy;
    for await (const envelope of t.get(new AbortController().signal)) {
      copy = envelope;
      break;
    }
    expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
    await t.ack(copy);
    await expectNoRowsEventually(TABLE, queueName);
    expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
  });
});
