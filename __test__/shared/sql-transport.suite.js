'use strict';

// SqlTransport beyond the conformance suite, written once and run on every SQL engine by
// sql/<engine>.transport.test.js: options, typed errors, schema life cycle (autoSetup,
// dropped tables), poison rows, storage format, batched and concurrent sends, queue isolation,
// FIFO, crash recovery, prefetch release, delayed redelivery, list/find/count, idle waits,
// get()/close(). The engine adapter (support/engines/) supplies its DSNs, raw row access in its
// own SQL and the facts a case depends on (pushWakeup, server, skipLocked, …); a case that
// holds on some engines only asks for the fact, never for the engine's name. Engine-only cases
// (LISTEN, max_allowed_packet, DSN forms, busy files …) stay in the engine's own files.

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
const { uniqueName } = require('../support/engines');
const { closedPort } = require('../support/ports');
const { sqlTable } = require('../support/sql-table');
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
  collect,
  rejectionOf,
  throwsSync,
  expectArrival,
} = require('../support/transport-helpers');

const MISSING_ID = 'Cannot ack or reject an envelope without a TransportMessageIdStamp.';
const CLOSED = 'Cannot send on a SQL transport that is closing or closed.';

/** Bodies and headers no consumer can turn into a message (undecodable or foreign). */
function poisonRows() {
  const typed = (type, stamps = '[]') => JSON.stringify({ 'X-Message-Type': type, 'X-Message-Stamps': stamps });
  return [
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
    ['', ''],
  ];
}

/**
 * Registers the shared SqlTransport cases for one engine and returns what its entry file
 * needs for its engine-only cases.
 * @param {ReturnType<typeof import('../support/engines').postgres>} engine a SQL engine adapter
 */
function sqlTransportSuite(engine) {
  /** The database of this file: the shared server database, or a private SQLite file. */
  const DSN = engine.runDsn('nmn-str');
  /** The same database under another DSN string: a pool of its own, whose sends wake nobody here. */
  const OTHER_DSN = engine.otherDsn(DSN);
  /** The table most tests share (each on its own queue); DDL tests use their own tables. */
  const { TABLE, db, queues, track, freshTable, dropAfterwards, consume } = sqlTable(engine, { dsn: DSN });
  /** Options that keep an idle consumer idle for a minute (no poll, no notify timeout). */
  const LONG_IDLE = { pollIntervalMs: 60000, ...(engine.pushWakeup ? { getNotifyTimeoutMs: 60000 } : {}) };
  const titles = (key, fallback) => engine.titles?.[key] ?? fallback;

  /** A transport on DSN and TABLE (unless overridden), closed after the test. */
  function transport(options = {}) {
    const queueName = options.queueName ?? uniqueName('q');
    queues.push(queueName);
    return track(new SqlTransport({ dsn: DSN, tableName: TABLE, serializer: serializer(), ...options, queueName }));
  }

  function lastQueue() {
    return queues[queues.length - 1];
  }

  /**
   * The queue's rows once there are `count` of them, or as they are after 2 s: acks are
   * written behind (recorded at once, deleted by the next flush), so a raw look at the table
   * right after an ack polls.
   */
  async function settledRows(table, queueName, count) {
    let last;
    await pollUntil(
      async () => {
        last = await db.rows(table, queueName);
        return last.length === count;
      },
      { timeoutMs: 2000 },
    );
    return last;
  }

  describe('construction and options', () => {
    it('constructs with every default and closes cleanly before any use', async () => {
      const t = new SqlTransport({ dsn: DSN });
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    });

    if (engine.server) {
      // A file engine's own case checks that construction creates no file.
      it('opens no connection in the constructor (an unreachable DSN constructs and closes)', async () => {
        const t = new SqlTransport({ dsn: engine.dsnWith({ port: await closedPort() }) });
        expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
      });
    }

    it('defaults to table messenger_messages, queue "default" and the JsonSerializer wire form', async () => {
      // No serializer given: the default is a JsonSerializer.
      const t = track(new SqlTransport({ dsn: DSN }));
      const sent = await t.send(envelopeOf('defaults-1', 'p'));
      const id = idOf(sent);
      try {
        const stored = await db.rowsById('messenger_messages', id);
        expect(stored).toHaveLength(1);
        expect(stored[0].queue_name).toBe('default');
        expect(stored[0].body).toBe('{"id":"defaults-1","payload":"p"}');
        expect(JSON.parse(stored[0].headers)).toEqual({ 'X-Message-Type': 'TestMessage', 'X-Message-Stamps': '[]' });
        expect(stored[0].delivered_at).toBeNull();
      } finally {
        // Ack by id (the send result carries it): deletes the row without consuming the queue.
        await t.ack(sent);
      }
      // Written behind: gone once the next flush ran.
      const gone = await pollUntil(async () => (await db.rowsById('messenger_messages', id)).length === 0, {
        timeoutMs: 2000,
      });
      expect(gone).toBe(true);
    });

    if (engine.server) {
      // A file engine's own case also checks the file it creates.
      it('creates its table on first use (autoSetup defaults to true)', async () => {
        const table = freshTable('nmn_auto');
        const t = transport({ tableName: table });
        expect(await db.tableExists(table)).toBe(false);
        await t.send(envelopeOf('auto-1'));
        expect(await db.tableExists(table)).toBe(true);
        const received = await receiveOne(t);
        await t.ack(received);
      });
    }

    it('writes the ReceivedStamp with the queue name unless a name is given', async () => {
      const plain = transport();
      await plain.send(envelopeOf('named-1'));
      const received = await receiveOne(plain);
      expect(received.last(ReceivedStamp)).toEqual(new ReceivedStamp(lastQueue()));
      await plain.ack(received);

      const named = transport({ name: 'async' });
      await named.send(envelopeOf('named-2'));
      const second = await receiveOne(named);
      expect(second.last(ReceivedStamp).transportName).toBe('async');
      await named.ack(second);
    });

    it('does not make a claimed, unsettled message claimable by others (redeliverTimeoutSeconds defaults to 3600)', async () => {
      const owner = transport();
      const other = transport({ queueName: lastQueue() });
      await owner.send(envelopeOf('held-1'));
      const held = await receiveOne(owner);
      expect(await receiveWithin(other, 300)).toBeUndefined();
      expect(await other.getMessageCount()).toBe(0);
      await owner.ack(held);
    });

    it(`polls at 100 ms by default${engine.pushWakeup ? ' when NOTIFY is off' : ''} (a row inserted behind its back arrives)`, async () => {
      const t = transport(engine.pushWakeup ? { useNotify: false } : {});
      const encoded = serializer().encode(envelopeOf('raw-1'));
      const consumer = receiveWithin(t, 1000);
      // A raw insert by another writer neither notifies nor wakes this process: only polling finds it.
      await db.insertRaw(TABLE, lastQueue(), encoded.body, JSON.stringify(encoded.headers));
      const received = await consumer;
      expect(received?.message).toEqual(new TestMessage('raw-1'));
      await t.ack(received);
    });

    it.each([
      ['an injection attempt', 'x; DROP TABLE y'],
      ['a backtick', 'messages`'],
      ['a double quote', 'messages"'],
      ['a single quote', "messages'"],
      ['a square bracket', 'messages]'],
      ['uppercase', 'Messages'],
      ['a schema-qualified name', engine.schemaQualifiedTable],
      ['a leading digit', '1messages'],
      ['a dash', 'messenger-messages'],
      ['a space', 'messenger messages'],
      ['a non-ASCII letter', 'tablé'],
      ['49 characters', 'a'.repeat(49)],
      ['the empty string', ''],
      ['a number', 42],
    ])('rejects a tableName with %s as InvalidArgumentError', (_, tableName) => {
      const error = throwsSync(() => new SqlTransport({ dsn: DSN, tableName }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error).toBeInstanceOf(MessengerError);
      expect(error).not.toBeInstanceOf(TransportError);
      expect(error.message).toMatch(/table ?name/i);
    });

    it(titles('tableNameBounds', 'creates and uses tables with the longest and the shortest valid names'), async () => {
      // 48 characters is the longest valid name (its index name, <table>_claim_idx, is 58).
      const longest = `nmn_${uniqueName('l').replace('_', '')}`.padEnd(48, 'x');
      expect(longest).toHaveLength(48);
      dropAfterwards(longest);
      // '_' is the shortest. In a shared server database it is only constructed: a table of that
      // name would outlive the run.
      const names = engine.server ? [longest] : [longest, '_'];
      for (const tableName of names) {
        expect(tableName.length === 48 || tableName === '_').toBe(true);
        const t = transport({ tableName });
        await t.setup();
        const sent = await t.send(envelopeOf(`table-${tableName.length}`));
        const received = await receiveOne(t);
        expect(idOf(received)).toBe(idOf(sent));
        await t.ack(received);
      }
      if (engine.server) {
        const shortest = new SqlTransport({ dsn: DSN, tableName: '_' });
        await shortest.close();
      }
    });

    it.each([
      ['empty', ''],
      ['191 characters long', 'q'.repeat(191)],
      ['not a string', 7],
    ])('rejects a queueName that is %s as InvalidArgumentError', (_, queueName) => {
      const error = throwsSync(() => new SqlTransport({ dsn: DSN, queueName }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error.message).toMatch(/queue ?name/i);
    });

    it.each(engine.longQueueNames)('accepts a 190-character queue name end to end%s', async (_, pad) => {
      const queueName = `${uniqueName('q')}_`.padEnd(190, pad);
      expect(queueName).toHaveLength(190);
      const t = transport({ queueName });
      await t.send(envelopeOf('long-queue'));
      expect(await t.getMessageCount()).toBe(1);
      const received = await receiveOne(t);
      expect(received.message).toEqual(new TestMessage('long-queue'));
      await t.ack(received);
      expect(await t.getMessageCount()).toBe(0);
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
    });

    it.each([
      ['pollIntervalMs', -1],
      ['pollIntervalMs', Number.NaN],
      ['pollIntervalMs', Number.POSITIVE_INFINITY],
      ['pollIntervalMs', '100'],
      ['redeliverTimeoutSeconds', -1],
      ['redeliverTimeoutSeconds', Number.NaN],
      // Only where it is an option at all: elsewhere any value is refused (see below).
      ...(engine.pushWakeup ? [['getNotifyTimeoutMs', -5]] : []),
      ['connectTimeoutMs', Number.NaN],
      ['connectTimeoutMs', -1],
    ])('rejects %s = %p as InvalidArgumentError', (option, value) => {
      const error = throwsSync(() => new SqlTransport({ dsn: DSN, [option]: value }));
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect(error.message).toContain(option);
    });

    it('rejects options that are not an object as InvalidArgumentError', () => {
      expect(throwsSync(() => new SqlTransport(null))).toBeInstanceOf(InvalidArgumentError);
      expect(throwsSync(() => new SqlTransport(undefined))).toBeInstanceOf(InvalidArgumentError);
    });

    if (!engine.pushWakeup) {
      it.each(engine.dsnForms(DSN))(
        'rejects useNotify / getNotifyTimeoutMs set at all (even false) with %s as InvalidArgumentError',
        async (_, dsn) => {
          for (const extra of [
            { useNotify: false },
            { useNotify: true },
            { getNotifyTimeoutMs: 1000 },
            { getNotifyTimeoutMs: 60000 },
            { useNotify: false, getNotifyTimeoutMs: 0 },
          ]) {
            const error = throwsSync(() => new SqlTransport({ dsn, ...extra }));
            expect(error).toBeInstanceOf(InvalidArgumentError);
            expect(error.message).toMatch(/PostgreSQL/);
          }
          // Explicitly undefined is "not set".
          const t = new SqlTransport({ dsn, useNotify: undefined, getNotifyTimeoutMs: undefined });
          await t.close();
        },
      );
    }

    if (engine.invalidDsns.length > 0) {
      it.each(engine.invalidDsns)('rejects %s as TransportConnectionError', (_, dsn) => {
        const error = throwsSync(() => new SqlTransport({ dsn }));
        expect(error).toBeInstanceOf(TransportConnectionError);
      });
    }
  });

  describe('misuse and close()', () => {
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
      expect(error.message).toBe(CLOSED);
      expect(await settledRows(TABLE, lastQueue(), 0)).toHaveLength(0);
      const reader = transport({ queueName: lastQueue() });
      expect(await collect(reader.list())).toEqual([]);
    });

    it('refuses to send while close() waits for an in-flight message', async () => {
      const t = transport();
      await t.send(envelopeOf('in-flight'));
      const received = await receiveOne(t);
      const closing = t.close();
      const error = await rejectionOf(t.send(envelopeOf('late')));
      expect(error).toBeInstanceOf(TransportError);
      expect(error.message).toBe(CLOSED);
      expect(await settleWithin(closing, 200)).toBe('timeout');
      await t.ack(received);
      expect(await settleWithin(closing, 3000)).toEqual({ value: undefined });
      expect(await settledRows(TABLE, lastQueue(), 0)).toHaveLength(0);
    });

    it('close() is idempotent, and get() after close() ends at once without yielding', async () => {
      const t = transport();
      await t.send(envelopeOf('left-behind'));
      await Promise.all([t.close(), t.close()]);
      await t.close();
      const iterator = t.get(new AbortController().signal);
      expect(await iterator.next()).toEqual({ value: undefined, done: true });
      const [row] = await db.rows(TABLE, lastQueue());
      expect(row.delivered_at).toBeNull();
    });
  });

  describe('schema life cycle', () => {
    it('with autoSetup disabled fails typed (NotFound) until setup() creates the table', async () => {
      const table = freshTable('nmn_nosetup');
      const t = transport({ tableName: table, autoSetup: false });

      const sendError = await rejectionOf(t.send(envelopeOf('early')));
      expect(sendError).toBeInstanceOf(TransportNotFoundError);
      expect(sendError.message).toMatch(new RegExp(`^${engine.errorLabel} transport failed during "send": `));
      expect(sendError.message).toContain(table);

      const getError = await rejectionOf(t.get(new AbortController().signal).next());
      expect(getError).toBeInstanceOf(TransportNotFoundError);

      expect(await rejectionOf(collect(t.list()))).toBeInstanceOf(TransportNotFoundError);
      expect(await rejectionOf(t.find('1'))).toBeInstanceOf(TransportNotFoundError);
      expect(await rejectionOf(t.getMessageCount())).toBeInstanceOf(TransportNotFoundError);
      expect(await db.tableExists(table)).toBe(false);

      await t.setup();
      await t.setup();
      // The engine's upstream DDL, column by column, with its claim index.
      await db.expectUpstreamSchema(table);

      const sent = await t.send(envelopeOf('after-setup'));
      const received = await receiveOne(t);
      expect(idOf(received)).toBe(idOf(sent));
      await t.ack(received);
      expect(await t.getMessageCount()).toBe(0);
    });

    it('setup() re-creates a table dropped under a live instance, which then acks the reused id 1 (ADR-007 regression)', async () => {
      // Ids restart at 1 in the re-created table (SQLite: DROP TABLE also removes its
      // sqlite_sequence entry).
      const table = freshTable('nmn_adr7');
      const t = transport({ tableName: table });
      const queueName = lastQueue();

      expect(idOf(await t.send(envelopeOf('before-drop')))).toBe('1');
      const first = await receiveOne(t);
      expect(idOf(first)).toBe('1');
      await t.ack(first);

      await db.dropTable(table);
      await t.setup();

      expect(idOf(await t.send(envelopeOf('after-drop')))).toBe('1');
      const again = await receiveOne(t);
      expect(idOf(again)).toBe('1');
      expect(again.message).toEqual(new TestMessage('after-drop'));
      await t.ack(again);
      expect(await settledRows(table, queueName, 0)).toHaveLength(0);

      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    });

    if (db.dropTableUnderBlockedDelete) {
      it("an ack whose delete meets the dropped table never deletes the re-created table's message with the reused id (ADR-007)", async () => {
        const table = freshTable('nmn_adr7b');
        const t = transport({ tableName: table });
        const queueName = lastQueue();
        expect(idOf(await t.send(envelopeOf('before-drop')))).toBe('1');
        const first = await receiveOne(t);

        // The ack's DELETE waits behind another session's lock; the table is dropped under it.
        const ackOutcome = await db.dropTableUnderBlockedDelete(table, () => settleWithin(t.ack(first), 10000));
        // The ack may report the vanished table (TransportNotFoundError) or nothing.
        if (ackOutcome.error !== undefined) expect(ackOutcome.error).toBeInstanceOf(TransportNotFoundError);
        expect(await db.tableExists(table)).toBe(false);

        await t.setup();
        expect(idOf(await t.send(envelopeOf('after-drop')))).toBe('1');

        // Whatever the old ack left behind must not touch the new message 1, nor fail unrelated calls.
        const observed = {
          firstCount: await settleWithin(t.getMessageCount(), 3000),
          secondCount: await settleWithin(t.getMessageCount(), 3000),
          stored: (await db.rows(table, queueName)).map((r) => [r.id, JSON.parse(r.body).id]),
        };
        expect(observed).toEqual({
          firstCount: { value: 1 },
          secondCount: { value: 1 },
          stored: [['1', 'after-drop']],
        });
        const again = await receiveOne(t);
        expect(idOf(again)).toBe('1');
        expect(again.message).toEqual(new TestMessage('after-drop'));
        await t.ack(again);
        expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
        expect(await db.rows(table, queueName)).toEqual([]);
      }, 20000);
    }

    it('with autoSetup, a send after the table vanished fails once with TransportNotFoundError, then heals by itself', async () => {
      const table = freshTable('nmn_heal');
      const t = transport({ tableName: table });
      const queueName = lastQueue();
      const first = await t.send(envelopeOf('before-drop'));
      const received = await receiveOne(t);
      expect(idOf(received)).toBe(idOf(first));
      await t.ack(received);

      await db.dropTable(table);

      const error = await rejectionOf(t.send(envelopeOf('lost')));
      expect(error).toBeInstanceOf(TransportNotFoundError);

      const healed = await t.send(envelopeOf('healed'));
      expect(idOf(healed)).toBe('1');
      const again = await receiveOne(t);
      expect(idOf(again)).toBe('1');
      expect(again.message).toEqual(new TestMessage('healed'));
      await t.ack(again);
      expect(await settledRows(table, queueName, 0)).toHaveLength(0);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    });

    it('with autoSetup, a consumer whose table vanished gets TransportNotFoundError once; the next get() heals', async () => {
      const table = freshTable('nmn_healget');
      const t = transport({ tableName: table });
      await t.send(envelopeOf('before-drop'));
      await t.ack(await receiveOne(t));

      await db.dropTable(table);

      const error = await rejectionOf(receiveWithin(t, 2000));
      expect(error).toBeInstanceOf(TransportNotFoundError);

      expect(await receiveWithin(t, 100)).toBeUndefined();
      expect(await db.tableExists(table)).toBe(true);
      await t.send(envelopeOf('healed'));
      const again = await receiveOne(t);
      expect(idOf(again)).toBe('1');
      await t.ack(again);
    });

    it('with autoSetup, list/find/count after the table vanished fail once with TransportNotFoundError, then heal', async () => {
      const table = freshTable('nmn_healread');
      const t = transport({ tableName: table });
      await t.setup();
      await db.dropTable(table);
      expect(await rejectionOf(t.getMessageCount())).toBeInstanceOf(TransportNotFoundError);
      expect(await t.getMessageCount()).toBe(0);
      await db.dropTable(table);
      expect(await rejectionOf(collect(t.list()))).toBeInstanceOf(TransportNotFoundError);
      expect(await collect(t.list())).toEqual([]);
      await db.dropTable(table);
      expect(await rejectionOf(t.find('1'))).toBeInstanceOf(TransportNotFoundError);
      expect(await t.find('1')).toBeUndefined();
    });

    it('maps a reject once the table vanished to TransportNotFoundError without hanging close()', async () => {
      const table = freshTable('nmn_rejgone');
      const t = transport({ tableName: table });
      await t.send(envelopeOf('doomed'));
      const received = await receiveOne(t);

      await db.dropTable(table);

      const error = await rejectionOf(t.reject(received));
      expect(error).toBeInstanceOf(TransportNotFoundError);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    });

    it(titles('idsNeverReused', 'never reuses an id while the table exists'), async () => {
      const table = freshTable('nmn_noreuse');
      const t = transport({ tableName: table });
      const first = await t.send(envelopeOf('one'));
      await t.ack(first);
      // The table is empty now; a plain SQLite rowid table would hand out 1 again.
      const second = await t.send(envelopeOf('two'));
      expect(Number(idOf(second))).toBeGreaterThan(Number(idOf(first)));
      expect(idOf(first)).toBe('1');
      expect(idOf(second)).toBe('2');
      await t.ack(second);
    });
  });

  describe('poison rows', () => {
    async function insertPoison(queueName) {
      const poison = poisonRows();
      for (const [body, headers] of poison) await db.insertRaw(TABLE, queueName, body, headers);
      return poison.length;
    }

    it('discards undecodable and foreign rows instead of looping, and delivers the good one', async () => {
      const t = transport();
      const queueName = lastQueue();
      const poisonCount = await insertPoison(queueName);
      const good = await t.send(envelopeOf('good'));
      expect(await db.rows(TABLE, queueName)).toHaveLength(poisonCount + 1);

      const received = await receiveUpTo(t, 2, 700);
      expect(received).toHaveLength(1);
      expect(received[0].message).toEqual(new TestMessage('good'));
      expect(idOf(received[0])).toBe(idOf(good));

      const remaining = await pollUntil(
        async () => {
          const left = await db.rows(TABLE, queueName);
          return left.length === 1 ? left : undefined;
        },
        { timeoutMs: 1000 },
      );
      expect(remaining?.map((r) => r.id)).toEqual([idOf(good)]);

      await t.ack(received[0]);
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
    });

    it('list() and find() skip undecodable rows without deleting them', async () => {
      const t = transport();
      const queueName = lastQueue();
      const poisonCount = await insertPoison(queueName);
      const good = await t.send(envelopeOf('good'));

      const listed = await collect(t.list());
      expect(listed.map(idOf)).toEqual([idOf(good)]);
      expect(listed[0].message).toEqual(new TestMessage('good'));

      const stored = await db.rows(TABLE, queueName);
      expect(stored).toHaveLength(poisonCount + 1);
      for (const row of stored.filter((r) => r.id !== idOf(good))) {
        expect(await t.find(row.id)).toBeUndefined();
      }
      expect(await db.rows(TABLE, queueName)).toHaveLength(poisonCount + 1);
      expect(stored.every((r) => r.delivered_at === null)).toBe(true);
      // getMessageCount counts rows, decodable or not (upstream's COUNT(*)).
      expect(await t.getMessageCount()).toBe(poisonCount + 1);
    });
  });

  describe('payloads and storage format', () => {
    it('round-trips a 1 MB body intact, stored byte for byte', async () => {
      const t = transport();
      const unit = 'abcdefghij\u00e9\u4e2d\ud83c\udf89"\\\n';
      const payload = unit.repeat(Math.ceil((1024 * 1024) / unit.length)).slice(0, 1024 * 1024);
      const envelope = envelopeOf('big', payload);
      const sent = await t.send(envelope);

      const expectedBody = serializer().encode(envelope).body;
      const stored = await db.storedBody(TABLE, idOf(sent));
      expect(stored.storageClass).toBe('text');
      expect(stored.bytes.equals(Buffer.from(expectedBody, 'utf8'))).toBe(true);

      const received = await receiveOne(t);
      expect(received.message.payload.length).toBe(payload.length);
      expect(received.message.payload === payload).toBe(true);
      const found = await t.find(idOf(sent));
      expect(found.message.payload === payload).toBe(true);
      await t.ack(received);
    });

    it('round-trips special characters in bodies, stamps and queue names', async () => {
      // Every engine's placeholder and escape syntax, so none of them is ever interpolated.
      const nasty = [
        'emoji 🎉👍🏽',
        'quotes " \' `',
        'escapes \n \t \r \\ \\n',
        'NUL \u0000 and lone surrogate \ud800',
        'CJK 中文 日本語 한국어, RTL עברית العربية',
        'line separators \u2028 \u2029',
        "SQL '; DROP TABLE messenger_messages; -- $1 $$ ? ?? ?1 :x @y $z %s \\' \\\\",
      ].join(' | ');
      const queueName = `${uniqueName('q')} '"; DROP TABLE x; -- 🎉 中文 \\ ?1 $1`;
      const t = transport({ queueName });
      const sent = await t.send(envelopeOf(nasty, nasty, [new BusNameStamp(nasty)]));

      expect((await collect(t.list())).map(idOf)).toEqual([idOf(sent)]);
      expect(await t.getMessageCount()).toBe(1);
      const received = await receiveOne(t);
      expect(received.message).toEqual(new TestMessage(nasty, nasty));
      expect(received.last(BusNameStamp)).toEqual(new BusNameStamp(nasty));
      const [stored] = await db.rowsById(TABLE, idOf(sent));
      expect(stored.queue_name).toBe(queueName);
      expect(stored.body).toBe(serializer().encode(envelopeOf(nasty, nasty)).body);
      await t.ack(received);
      expect(await t.getMessageCount()).toBe(0);
    });

    const times = engine.storesTextTimes ? 'UTC text times, ' : '';
    it(`stores exactly the upstream row format (body, double-encoded headers, ${times}DB-clock delay)`, async () => {
      const t = transport();
      const queueName = lastQueue();
      const redeliveredAt = new Date('2026-01-02T03:04:05.678Z');
      const envelope = envelopeOf('fmt-1', 'payload', [
        new BusNameStamp('command.bus'),
        new RedeliveryStamp(2, redeliveredAt),
        new DelayStamp(60000),
        // Non-sendable: never stored.
        new ReceivedStamp('elsewhere'),
        new TransportMessageIdStamp('999'),
      ]);
      const before = Date.now();
      const sent = await t.send(envelope);
      const after = Date.now();

      expect(idOf(sent)).toMatch(/^[1-9]\d*$/);
      expect(typeof sent.last(TransportMessageIdStamp).id).toBe('string');
      expect(sent.message).toBe(envelope.message);
      expect(sent.last(DelayStamp)).toEqual(new DelayStamp(60000));

      const stored = await db.storedRows(TABLE, queueName);
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
      // available_at - created_at, both from the database's clock.
      expect(row.delayMs).toBeGreaterThanOrEqual(59999);
      expect(row.delayMs).toBeLessThanOrEqual(60001);
      // created_at is the database's now (for MySQL, of a default session: the server's zone).
      expect(row.ageMs).toBeGreaterThanOrEqual(0);
      expect(row.ageMs).toBeLessThan(10000);
      if (engine.storesTextTimes) {
        // UTC text, millisecond precision, from SQLite's clock (which is this machine's).
        const TIME = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$/;
        const utcMs = (text) => Date.parse(`${text.replace(' ', 'T')}Z`);
        expect(row.created_at).toMatch(TIME);
        expect(row.available_at).toMatch(TIME);
        expect(utcMs(row.created_at)).toBeGreaterThanOrEqual(before - 1000);
        expect(utcMs(row.created_at)).toBeLessThanOrEqual(after + 1000);
        expect(utcMs(row.available_at) - utcMs(row.created_at)).toBe(row.delayMs);
      }

      // Not due: counted out, listed in, and deleted by an ack of the send result.
      expect(await t.getMessageCount()).toBe(0);
      expect((await collect(t.list())).map(idOf)).toEqual([idOf(sent)]);
      await t.ack(sent);
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
    });

    it('decodes rows written in the upstream form by another writer', async () => {
      const t = transport();
      const encoded = serializer().encode(envelopeOf('foreign-1', 'x', [new RedeliveryStamp(3, new Date(0))]));
      await db.insertRaw(TABLE, lastQueue(), encoded.body, JSON.stringify(encoded.headers));
      const received = await receiveOne(t);
      expect(received.message).toEqual(new TestMessage('foreign-1', 'x'));
      expect(received.last(RedeliveryStamp).retryCount).toBe(3);
      expect(received.last(RedeliveryStamp).redeliveredAt).toBe('1970-01-01T00:00:00.000Z');
      await t.ack(received);
    });
  });

  describe('batched and concurrent sends', () => {
    it('maps each concurrently sent message (batched INSERTs) to its own id, and delivers them in id order', async () => {
      const table = freshTable('nmn_fifo');
      const t = transport({ tableName: table });
      await t.setup();
      const sent = await Promise.all(Array.from({ length: 15 }, (_, i) => t.send(envelopeOf(`c-${i}`))));
      const idByMessage = new Map(sent.map((e) => [e.message.id, idOf(e)]));
      expect(new Set(idByMessage.values()).size).toBe(15);

      const stored = await db.rows(table, lastQueue());
      expect(stored).toHaveLength(15);
      for (const row of stored) {
        expect(idByMessage.get(JSON.parse(row.body).id)).toBe(row.id);
      }

      const received = await receiveUpTo(t, 15, 2000);
      for (const e of received) await t.ack(e);
      const receivedIds = received.map(idOf);
      expect(receivedIds).toEqual([...idByMessage.values()].sort((a, b) => Number(a) - Number(b)));
      for (const e of received) expect(idOf(e)).toBe(idByMessage.get(e.message.id));
    });

    const { kb, why } = engine.concurrentSendSize;
    it(`stores 200 concurrent ~${kb} KB sends${why} with ids in call order, and delivers each once`, async () => {
      const t = transport();
      const queueName = lastQueue();
      const count = 200;
      const filler = 'z'.repeat(kb * 1024);
      const sent = await Promise.all(
        Array.from({ length: count }, (_, i) => t.send(envelopeOf(`big-${i}`, `${i}:${filler}`))),
      );
      const ids = sent.map(idOf);
      for (let i = 1; i < count; i += 1) expect(Number(ids[i])).toBeGreaterThan(Number(ids[i - 1]));

      const stored = await db.storedBodies(TABLE, queueName);
      expect(stored).toHaveLength(count);
      expect(stored.map((r) => [r.id, r.mid])).toEqual(ids.map((id, i) => [id, `big-${i}`]));
      const expectedBytes = (i) => Buffer.byteLength(serializer().encode(envelopeOf(`big-${i}`, `${i}:${filler}`)).body);
      expect(stored.every((r, i) => r.bytes === expectedBytes(i))).toBe(true);

      const received = await receiveUpTo(t, count, 10000);
      expect(received.map(idOf)).toEqual(ids);
      expect(received.every((e, i) => e.message.id === `big-${i}` && e.message.payload === `${i}:${filler}`)).toBe(
        true,
      );
      await Promise.all(received.map((e) => t.ack(e)));
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
    }, 60000);

    it(`maps ids correctly when two pools send batches into one ${engine.storageNoun} at the same time`, async () => {
      const queueName = uniqueName('q');
      const a = transport({ queueName });
      const b = transport({ queueName, dsn: OTHER_DSN });
      await Promise.all([a.getMessageCount(), b.getMessageCount()]);
      const sends = [];
      for (let i = 0; i < 150; i += 1) {
        sends.push(a.send(envelopeOf(`a-${i}`)));
        sends.push(b.send(envelopeOf(`b-${i}`)));
      }
      const sent = await Promise.all(sends);
      const idByMessage = new Map(sent.map((e) => [e.message.id, idOf(e)]));
      expect(new Set(idByMessage.values()).size).toBe(300);
      const stored = await db.storedBodies(TABLE, queueName);
      expect(stored).toHaveLength(300);
      for (const row of stored) expect(idByMessage.get(row.mid)).toBe(row.id);
    }, 20000);

    it(`lets two consumers on two pools share one queue, each message delivered exactly once${engine.skipLocked ? ' (SKIP LOCKED)' : ''}`, async () => {
      const queueName = uniqueName('q');
      const producer = transport({ queueName });
      const c1 = transport({ queueName });
      const c2 = transport({ queueName, dsn: OTHER_DSN });
      const ids = (await Promise.all(Array.from({ length: 100 }, (_, i) => producer.send(envelopeOf(`s-${i}`))))).map(
        idOf,
      );
      const first = consume(c1);
      const second = consume(c2);
      await pollUntil(() => first.arrivals.length + second.arrivals.length >= 100, { timeoutMs: 8000, intervalMs: 10 });
      const all = [...first.arrivals, ...second.arrivals].map((a) => idOf(a.envelope));
      expect(all.sort((x, y) => Number(x) - Number(y))).toEqual(ids);
      expect(await settleWithin(first.done, 200)).toBe('timeout');
    }, 20000);
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

      // Asks for one more than there is: nothing of the other queue may come.
      const gotA = await receiveUpTo(a, 4, 700);
      expect(gotA.map(idOf)).toEqual(sentA);
      expect(gotA.map((e) => e.message.id)).toEqual(['a-0', 'a-1', 'a-2']);
      for (const e of gotA) await a.ack(e);
      expect(await receiveWithin(a, 300)).toBeUndefined();
      expect(await b.getMessageCount()).toBe(2);

      const gotB = await receiveUpTo(b, 3, 700);
      expect(gotB.map(idOf)).toEqual(sentB);
      for (const e of gotB) await b.ack(e);

      expect(await a.getMessageCount()).toBe(0);
      expect(await b.getMessageCount()).toBe(0);
    });
  });

  describe('FIFO order', () => {
    // Rows written by one statement share available_at; the tie must then break on the
    // numeric id (not its text form: "10" < "2"), as upstream's claim does.
    async function insertTied(table, queueName, count) {
      const encoded = serializer().encode(envelopeOf('template'));
      await db.insertTied(table, queueName, count, JSON.stringify(encoded.headers));
      return Array.from({ length: count }, (_, i) => String(i + 1));
    }

    it('claims rows with equal available_at in numeric id order across a digit boundary', async () => {
      const table = freshTable('nmn_fifo');
      const t = transport({ tableName: table });
      await t.setup();
      const expected = await insertTied(table, lastQueue(), 12);

      const received = await receiveUpTo(t, 12, 2000);
      for (const e of received) await t.ack(e);
      expect(received.map(idOf)).toEqual(expected);
      expect(received.map((e) => e.message.id)).toEqual(expected.map((id) => `f-${id}`));
    });

    it('lists rows with equal available_at in numeric id order across a digit boundary', async () => {
      const table = freshTable('nmn_fifo');
      const t = transport({ tableName: table });
      await t.setup();
      const expected = await insertTied(table, lastQueue(), 12);

      expect((await collect(t.list())).map(idOf)).toEqual(expected);
      expect((await collect(t.list(3))).map(idOf)).toEqual(['1', '2', '3']);
    });

    it('delivers in available_at order first: an earlier-due later id goes before a later-due earlier id', async () => {
      const t = transport();
      const late = await t.send(envelopeOf('late', '', [new DelayStamp(300)]));
      const early = await t.send(envelopeOf('early'));
      const received = await receiveUpTo(t, 2, 3000);
      expect(received.map(idOf)).toEqual([idOf(early), idOf(late)]);
      for (const e of received) await t.ack(e);
    });
  });

  describe('crash recovery and prefetch', () => {
    it(
      titles(
        'staleRedelivery',
        'redelivers a message left in flight beyond redeliverTimeoutSeconds 0 (same id, no RedeliveryStamp)',
      ),
      async () => {
        const crashed = transport();
        const queueName = lastQueue();
        const reaper = transport({ queueName, redeliverTimeoutSeconds: 0 });
        const sent = await crashed.send(envelopeOf('orphan', 'data'));
        const first = await receiveOne(crashed);
        expect(idOf(first)).toBe(idOf(sent));

        // delivered_at has millisecond precision: let the DB clock move past it.
        expect(await pollUntil(() => db.isStale(TABLE, idOf(first)), { timeoutMs: 1000 })).toBe(true);

        const second = await receiveOne(reaper);
        expect(idOf(second)).toBe(idOf(first));
        expect(second.message).toEqual(new TestMessage('orphan', 'data'));
        expect(second.last(RedeliveryStamp)).toBeUndefined();
        await reaper.ack(second);
        expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);

        // The "crashed" instance's late ack is a harmless no-op, and lets it close.
        await crashed.ack(first);
      },
    );

    // An idle consumer that polls finds the expired claim at its next poll. One with push
    // wake-up sleeps until a notification or getNotifyTimeoutMs instead: it is not (yet) woken
    // when the lease expires, so this case holds only where consumers poll.
    if (!engine.pushWakeup) {
      it('redelivers after redeliverTimeoutSeconds 1, not before', async () => {
        const crashed = transport();
        const queueName = lastQueue();
        const reaper = transport({ queueName, redeliverTimeoutSeconds: 1 });
        await crashed.send(envelopeOf('orphan-1s'));
        const first = await receiveOne(crashed);
        const claimedAt = Date.now();

        expect(await receiveWithin(reaper, 500)).toBeUndefined();
        const second = await receiveOne(reaper, 4000);
        const elapsed = Date.now() - claimedAt;
        expect(elapsed).toBeGreaterThanOrEqual(900);
        expect(elapsed).toBeLessThan(3500);
        expect(idOf(second)).toBe(idOf(first));
        expect(second.last(RedeliveryStamp)).toBeUndefined();
        await reaper.ack(second);
        await crashed.ack(first);
      }, 10000);
    }

    it('makes no copy when the crashed instance rejects a message the reaper already acked', async () => {
      const crashed = transport();
      const queueName = lastQueue();
      const reaper = transport({ queueName, redeliverTimeoutSeconds: 0 });
      await crashed.send(envelopeOf('taken-over'));
      const first = await receiveOne(crashed);
      expect(await pollUntil(() => db.isStale(TABLE, idOf(first)), { timeoutMs: 1000 })).toBe(true);
      const second = await receiveOne(reaper);
      await reaper.ack(second);

      await crashed.reject(first);
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
      expect(await settleWithin(crashed.close(), 3000)).toEqual({ value: undefined });
    });

    it('releases prefetched rows as soon as the get() loop is left', async () => {
      const t = transport();
      const queueName = lastQueue();
      const ids = [];
      for (let i = 0; i < 5; i += 1) ids.push(idOf(await t.send(envelopeOf(`pf-${i}`))));

      let first;
      for await (const envelope of t.get(new AbortController().signal)) {
        first = envelope;
        break;
      }
      expect(idOf(first)).toBe(ids[0]);

      // Released before get() finished: no waiting needed.
      const stored = await db.rows(TABLE, queueName);
      const others = stored.filter((r) => r.id !== ids[0]);
      expect(others.map((r) => r.id)).toEqual(ids.slice(1));
      expect(others.every((r) => r.delivered_at === null)).toBe(true);
      const [firstRow] = stored.filter((r) => r.id === ids[0]);
      expect(firstRow.delivered_at).not.toBeNull();

      const other = transport({ queueName });
      const rest = await receiveUpTo(other, 4, 2000);
      expect(rest.map(idOf)).toEqual(ids.slice(1));
      for (const e of rest) await other.ack(e);
      await t.ack(first);
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
    });

    it('releases prefetched rows on close()', async () => {
      const t = transport();
      const queueName = lastQueue();
      const ids = [];
      for (let i = 0; i < 5; i += 1) ids.push(idOf(await t.send(envelopeOf(`pfc-${i}`))));

      const iterator = t.get(new AbortController().signal);
      const { value: first } = await iterator.next();
      expect(idOf(first)).toBe(ids[0]);
      await t.ack(first);
      await t.close();

      const stored = await db.rows(TABLE, queueName);
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
      const queueName = lastQueue();
      const sent = await t.send(envelopeOf('delayed', 'd', [new DelayStamp(300)]));
      const first = await receiveOne(t, 3000);
      expect(idOf(first)).toBe(idOf(sent));

      const rejectedAt = Date.now();
      await t.reject(first);
      const copy = await receiveOne(t, 3000);
      const elapsed = Date.now() - rejectedAt;

      expect(elapsed).toBeGreaterThanOrEqual(250);
      expect(idOf(copy)).not.toBe(idOf(first));
      expect(Number(idOf(copy))).toBeGreaterThan(Number(idOf(first)));
      expect(copy.message).toEqual(new TestMessage('delayed', 'd'));
      expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
      expect(copy.last(DelayStamp)).toEqual(new DelayStamp(300));
      expect((await db.rows(TABLE, queueName)).map((r) => r.id)).toEqual([idOf(copy)]);
      await t.ack(copy);
    });

    const roundTrips = [
      ['round-trips through two redeliveries', {}],
      // With push wake-up switched off, the copies are found by polling.
      ...(engine.pushWakeup ? [['round-trips, including a redelivery, with useNotify disabled', { useNotify: false }]] : []),
    ];
    for (const [title, options] of roundTrips) {
      it(title, async () => {
        const t = transport(options);
        const sent = await t.send(envelopeOf('again'));
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
    }

    it('does nothing when rejecting an envelope this instance did not deliver', async () => {
      const t = transport();
      const other = transport({ queueName: lastQueue() });
      const sent = await t.send(envelopeOf('not-mine'));
      await other.reject(sent);
      await other.reject(await other.find(idOf(sent)));
      const received = await receiveOne(t);
      await other.reject(received);
      expect((await db.rows(TABLE, lastQueue())).map((r) => r.id)).toEqual([idOf(sent)]);
      expect((await collect(t.list())).map(idOf)).toEqual([idOf(sent)]);
      await t.ack(received);
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
      for (const id of ['abc', '99999999999999999999', '0', '-1', '', '1.5', ' 1', '1e3']) {
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

    it('find() accepts only plain decimal ids, as upstream (/^\\d+$/): "+<id>" finds nothing', async () => {
      const t = transport();
      const id = idOf(await t.send(envelopeOf('plus')));
      expect(idOf(await t.find(id))).toBe(id);
      expect(await t.find(`+${id}`)).toBeUndefined();
    });

    it('lists 100 messages by default and honours an explicit limit', async () => {
      const t = transport();
      const encoded = serializer().encode(envelopeOf('template'));
      // bulk-1 … bulk-105, each due 1 ms after the one before.
      await db.insertSpread(TABLE, lastQueue(), 105, JSON.stringify(encoded.headers));
      const all = await collect(t.list());
      expect(all).toHaveLength(100);
      expect(all.map((e) => e.message.id)).toEqual(Array.from({ length: 100 }, (_, i) => `bulk-${i + 1}`));
      expect((await collect(t.list(3))).map((e) => e.message.id)).toEqual(['bulk-1', 'bulk-2', 'bulk-3']);
      expect(await collect(t.list(500))).toHaveLength(105);
    });
  });

  describe('idle waits', () => {
    it.each([
      ['the consuming transport itself', false],
      ['another transport on the same DSN', true],
    ])('an in-process send from %s wakes an idle consumer at once (pollIntervalMs 60000)', async (_, separate) => {
      const queueName = uniqueName('q');
      const consuming = transport({ queueName, ...LONG_IDLE });
      const sender = separate ? transport({ queueName }) : consuming;
      const consumer = consume(consuming);
      expect(await consuming.getMessageCount()).toBe(0);
      // Let the consumer reach its idle wait (its empty claim is done by now).
      expect(await settleWithin(consumer.done, 300)).toBe('timeout');

      const sentAt = Date.now();
      const sent = await sender.send(envelopeOf('wake'));
      const { elapsed } = await expectArrival(consumer, sent, sentAt, 2000);
      expect(elapsed).toBeLessThan(300);
    });

    it('delivers an in-process delayed send on time to an idle consumer although pollIntervalMs is 60 s', async () => {
      const t = transport(LONG_IDLE);
      const consumer = consume(t);
      expect(await t.getMessageCount()).toBe(0);
      expect(await settleWithin(consumer.done, 300)).toBe('timeout');

      const sentAt = Date.now();
      const sent = await t.send(envelopeOf('delayed', '', [new DelayStamp(400)]));
      const { elapsed } = await expectArrival(consumer, sent, sentAt, 3000);
      expect(elapsed).toBeGreaterThanOrEqual(350);
      expect(elapsed).toBeLessThanOrEqual(1500);
    }, 10000);

    if (!engine.pushWakeup) {
      // Nothing wakes the consumer in these two: the sender is another pool, and the engine has
      // no push. (With push wake-up, the engine's own file covers the same.)
      it(`bounds the idle wait by the next available_at for a delayed message sent on ${engine.otherDsnNoun} (another pool)`, async () => {
        // The consumer's idle wait after its empty claim is bounded by the row's available_at.
        const queueName = uniqueName('q');
        const sender = transport({ queueName, dsn: OTHER_DSN });
        await sender.getMessageCount();
        const sentAt = Date.now();
        const sent = await sender.send(envelopeOf('delayed-other', '', [new DelayStamp(400)]));
        const consumer = consume(transport({ queueName, pollIntervalMs: 60000 }));
        const { elapsed } = await expectArrival(consumer, sent, sentAt, 3000);
        expect(elapsed).toBeGreaterThanOrEqual(350);
        expect(elapsed).toBeLessThanOrEqual(1500);
      }, 10000);

      it(`finds a message sent on ${engine.otherDsnNoun} by polling at pollIntervalMs`, async () => {
        const queueName = uniqueName('q');
        const sender = transport({ queueName, dsn: OTHER_DSN });
        const consuming = transport({ queueName, pollIntervalMs: 300 });
        await sender.getMessageCount();
        const consumer = consume(consuming);
        expect(await consuming.getMessageCount()).toBe(0);
        expect(await settleWithin(consumer.done, 100)).toBe('timeout');
        const sentAt = Date.now();
        const sent = await sender.send(envelopeOf('polled'));
        const { elapsed } = await expectArrival(consumer, sent, sentAt, 3000);
        expect(elapsed).toBeLessThan(1200);
      });
    }
  });

  describe('get() and close()', () => {
    it('get() with an already-aborted signal returns at once and claims nothing', async () => {
      const t = transport();
      const queueName = lastQueue();
      await t.send(envelopeOf('untouched'));
      const iterator = t.get(AbortSignal.abort());
      expect(await settleWithin(iterator.next(), 500)).toEqual({ value: { value: undefined, done: true } });
      const [row] = await db.rows(TABLE, queueName);
      expect(row.delivered_at).toBeNull();
      expect(await t.getMessageCount()).toBe(1);
    });

    it('close() ends a consumer blocked on an idle wait promptly, without throwing', async () => {
      const t = transport(LONG_IDLE);
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
      const t = transport(LONG_IDLE);
      const controller = new AbortController();
      const consumer = (async () => {
        for await (const envelope of t.get(controller.signal)) void envelope;
        return 'ended';
      })();
      expect(await t.getMessageCount()).toBe(0);
      expect(await settleWithin(consumer, 200)).toBe('timeout');
      const started = Date.now();
      controller.abort();
      expect(await settleWithin(consumer, 1000)).toEqual({ value: 'ended' });
      expect(Date.now() - started).toBeLessThan(1000);
    });

    it('accepts ack and reject after the get() iterator was disposed', async () => {
      const t = transport();
      const queueName = lastQueue();
      await t.send(envelopeOf('late-settle'));
      let first;
      for await (const envelope of t.get(new AbortController().signal)) {
        first = envelope;
        break;
      }
      await t.reject(first);
      // A second reject of the same delivery stays a no-op after disposal too.
      await t.reject(first);
      const stored = await db.rows(TABLE, queueName);
      expect(stored).toHaveLength(1);
      expect(stored[0].id).not.toBe(idOf(first));

      let copy;
      for await (const envelope of t.get(new AbortController().signal)) {
        copy = envelope;
        break;
      }
      expect(copy.last(RedeliveryStamp).retryCount).toBe(1);
      await t.ack(copy);
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    });
  });

  return { DSN, OTHER_DSN, TABLE, db, transport, lastQueue, freshTable, consume, settledRows };
}

module.exports = { sqlTransportSuite };
