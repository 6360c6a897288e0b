'use strict';

// The table's life cycle: autoSetup, setup(), a table dropped under a live instance (ADR-007),
// ids. Part of the shared SqlTransport suite (../sql-transport.suite.js), which supplies `ctx`.

const { TransportNotFoundError } = require('@schally/nestjs-messenger');
const {
  TestMessage,
  envelopeOf,
  idOf,
  receiveWithin,
  receiveOne,
  settleWithin,
  collect,
  rejectionOf,
} = require('../../support/transport-helpers');

/** Registers the cases of this part for the engine of `ctx`. */
function schemaCases(ctx) {
  const { engine, TABLE, db, freshTable, titles, transport, lastQueue, settledRows } = ctx;

  describe('schema life cycle', () => {
    /** A transport on a fresh table (named after `prefix`) holding the table's first message, id 1 (asserted). */
    async function holdingIdOne(prefix) {
      const table = freshTable(prefix);
      const t = transport({ tableName: table });
      const queueName = lastQueue();
      expect(idOf(await t.send(envelopeOf('before-drop')))).toBe('1');
      const first = await receiveOne(t);
      return { table, t, queueName, first };
    }

    /** Receives the message `id` as id 1 again, acks it, sees the queue empty and `t` close promptly. */
    async function expectReusedIdOne(t, table, queueName, id) {
      const again = await receiveOne(t);
      expect(idOf(again)).toBe('1');
      expect(again.message).toEqual(new TestMessage(id));
      await t.ack(again);
      expect(await settledRows(table, queueName, 0)).toHaveLength(0);
      expect(await settleWithin(t.close(), 3000)).toEqual({ value: undefined });
    }

    it('with autoSetup disabled fails typed (NotFound) until setup() creates the table', async () => {
      const table = freshTable('nmn_nosetup');
      const t = transport({ tableName: table, autoSetup: false });

      const sendError = await rejectionOf(t.send(envelopeOf('early')));
      expect(sendError).toBeInstanceOf(TransportNotFoundError);
      expect(sendError.message).toMatch(new RegExp(`^${engine.errorLabel} transport failed during "send": `));
      expect(sendError.message).toContain(table);
      // Our code as a property, the driver's (pg's SQLSTATE, mysql2's name, better-sqlite3's) on the cause.
      expect(sendError.code).toBe('E_NOT_FOUND');
      expect(sendError.cause).toBeInstanceOf(Error);
      expect(sendError.cause).toMatchObject(engine.missingTableCause);
      expect(sendError.cause.message).not.toMatch(/transport failed during/);

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
      const { table, t, queueName, first } = await holdingIdOne('nmn_adr7');
      expect(idOf(first)).toBe('1');
      await t.ack(first);

      await db.dropTable(table);
      await t.setup();

      expect(idOf(await t.send(envelopeOf('after-drop')))).toBe('1');
      await expectReusedIdOne(t, table, queueName, 'after-drop');
    });

    if (db.dropTableUnderBlockedDelete) {
      it("an ack whose delete meets the dropped table never deletes the re-created table's message with the reused id (ADR-007)", async () => {
        const { table, t, queueName, first } = await holdingIdOne('nmn_adr7b');

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
      await expectReusedIdOne(t, table, queueName, 'healed');
    });

    it('with autoSetup, a consumer whose table vanished goes on: the table is re-created and what is sent next is delivered', async () => {
      const table = freshTable('nmn_healget');
      const t = transport({ tableName: table });
      await t.send(envelopeOf('before-drop'));
      await t.ack(await receiveOne(t));

      await db.dropTable(table);

      // A get() over the vanished table neither throws nor ends: its claim re-creates it.
      const next = receiveWithin(t, 5000);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(await db.tableExists(table)).toBe(true);
      await t.send(envelopeOf('healed'));
      const again = await next;
      expect(again?.message.id).toBe('healed');
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

    // CREATE TABLE IF NOT EXISTS asks for the right to create before it looks for the table
    // (PostgreSQL 15 grants no one that right on public): an app account granted only the use
    // of a table a migration made must not fail on auto-setup.
    if (db.accountForTable) {
      it('with the default autoSetup, sends, receives and acks as an account that may use the table but not create tables', async () => {
        const table = freshTable('nmn_granted');
        await transport({ tableName: table }).setup();
        const account = await db.accountForTable(table);
        try {
          const t = transport({ dsn: account.dsn, tableName: table });
          const sent = await t.send(envelopeOf('as-app-account'));
          const received = await receiveOne(t);
          expect(idOf(received)).toBe(idOf(sent));
          await t.ack(received);
          expect(await t.getMessageCount()).toBe(0);
          await t.close();
        } finally {
          await account.drop();
        }
      });
    }

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
}

module.exports = { schemaCases };
