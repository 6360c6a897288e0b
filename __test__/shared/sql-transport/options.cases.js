'use strict';

// Construction, options and misuse: what a SqlTransport accepts, refuses, and does when closed.
// Part of the shared SqlTransport suite (../sql-transport.suite.js), which supplies `ctx`.

const {
  InvalidArgumentError,
  MessengerError,
  ReceivedStamp,
  TransportConnectionError,
  TransportError,
  TransportMessageIdStamp,
} = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../../..');
const { uniqueName } = require('../../support/engines');
const { closedPort } = require('../../support/ports');
const {
  TestMessage,
  serializer,
  envelopeOf,
  idOf,
  receiveWithin,
  receiveOne,
  pollUntil,
  settleWithin,
  collect,
  rejectionOf,
  throwsSync,
} = require('../../support/transport-helpers');

const MISSING_ID = 'Cannot ack or reject an envelope without a TransportMessageIdStamp.';
const CLOSED = 'Cannot send on a SQL transport that is closing or closed.';

/** Registers the cases of this part for the engine of `ctx`. */
function optionsCases(ctx) {
  const { engine, DSN, TABLE, db, track, freshTable, dropAfterwards, titles, transport, lastQueue, settledRows } = ctx;

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
      // A failure of the transport's own: its stable code, no driver cause.
      expect(error.code).toBe('E_INVALID_ARGUMENT');
      expect(error.cause).toBeUndefined();
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
      expect(error.code).toBe('E_INVALID_ARGUMENT');
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
      expect(error.code).toBe('E_CLOSED');
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
      expect(error.code).toBe('E_CLOSED');
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
}

module.exports = { optionsCases };
