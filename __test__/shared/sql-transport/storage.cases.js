'use strict';

// What is stored and in what order: poison rows, payloads and the upstream row format, batched
// and concurrent sends, queue isolation, FIFO. Part of the shared SqlTransport suite
// (../sql-transport.suite.js), which supplies `ctx`.

const {
  BusNameStamp,
  DelayStamp,
  ReceivedStamp,
  RedeliveryStamp,
  TransportMessageIdStamp,
} = require('@schally/nestjs-messenger');
const { uniqueName } = require('../../support/engines');
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
} = require('../../support/transport-helpers');

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

/** Registers the cases of this part for the engine of `ctx`. */
function storageCases(ctx) {
  const { engine, OTHER_DSN, TABLE, db, queues, freshTable, consume, transport, lastQueue, settledRows } = ctx;

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
}

module.exports = { storageCases };
