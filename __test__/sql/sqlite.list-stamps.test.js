'use strict';

// SQLite has no upstream transport, so what its list(), find() and get() yield is held to
// the rule upstream's SQL transport decodes a stored row by: its own decode, run on the very
// row the sqlite3 CLI reads back from the file (an upstream instance built on a PostgreSQL DSN
// that never connects: decoding needs no database). The PostgreSQL, MariaDB and Redis cases
// compare against upstream's live list() and find() in the mixed-fleet files.

const fs = require('node:fs');
const path = require('node:path');
const { ErrorDetailsStamp, RedeliveryStamp } = require('@schally/nestjs-messenger');
const { SqlTransport: UpstreamSqlTransport } = require('@schally/nestjs-messenger-transport-sql');
const { SqlTransport } = require('../..');
const { sqlite, uniqueName } = require('../support/engines');
const { fleetSerializer, idOf, outgoing } = require('../support/fleet');
const { collect } = require('../support/transport-helpers');
const { everyStamp } = require('../support/every-stamp');

const TABLE = 'messenger_messages';
const NAME = 'sqlite-worker';
const dsn = sqlite.runDsn('list-stamps');
let transport;

/** Upstream's own decode of a stored row, as its list(), find() and get() apply it. */
function upstreamDecode(row) {
  const upstream = new UpstreamSqlTransport({ dsn: 'postgres://127.0.0.1:1/never', name: NAME, serializer: fleetSerializer() });
  return upstream.decode(row);
}

beforeAll(() => sqlite.requireCli());

afterEach(async () => {
  await transport?.close();
  transport = undefined;
});

afterAll(() => fs.rmSync(path.dirname(dsn.slice('sqlite://'.length)), { recursive: true, force: true }));

test('list(), find() and get() yield every stamp upstream’s decode gives the stored row, in its order', async () => {
  const queueName = uniqueName('stamps');
  transport = new SqlTransport({ dsn, queueName, name: NAME, serializer: fleetSerializer() });
  const ids = [
    idOf(await transport.send(outgoing(0, 'first', new RedeliveryStamp(2, new Date('2026-01-02T03:04:05.678Z'))))),
    idOf(await transport.send(outgoing(1, 'second', new ErrorDetailsStamp('Error', 'boom', 42)))),
  ];
  const rows = await sqlite.testAdmin(dsn).storedRows(TABLE, queueName);
  expect(rows.map((row) => row.id)).toEqual(ids);
  const expected = rows.map((row) => everyStamp(upstreamDecode({ id: row.id, body: row.body, headers: row.headers })));

  expect((await collect(transport.list())).map(everyStamp)).toEqual(expected);
  for (const [i, id] of ids.entries()) {
    const found = await transport.find(id);
    expect(everyStamp(found)).toEqual(expected[i]);
    // Spelled out: upstream's decode appends the ReceivedStamp, then the id.
    expect(everyStamp(found).slice(-2)).toEqual([
      { type: 'ReceivedStamp', data: { transportName: NAME } },
      { type: 'TransportMessageIdStamp', data: { id } },
    ]);
  }

  const controller = new AbortController();
  const received = [];
  for await (const envelope of transport.get(controller.signal)) {
    received.push(envelope);
    await transport.ack(envelope);
    if (received.length === ids.length) break;
  }
  expect(received.map(everyStamp)).toEqual(expected);
});
