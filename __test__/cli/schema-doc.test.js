'use strict';

// docs/schema.md's DDL is what the transports need: run as written (under another table
// name) on each SQL engine, `doctor --no-auto-setup` finds every check passing, and a
// transport with autoSetup: false moves a message through the table.

const fs = require('node:fs');
const path = require('node:path');
const { SqlTransport } = require('../..');
const { runCli, jsonOf, verdicts, removeTemp, SQL_ENGINES, uniqueName, tablesDroppedAfterAll } = require('./cli-support');
const { envelopeOf, receiveOne, serializer } = require('../support/transport-helpers');

jest.setTimeout(30000);

afterAll(() => removeTemp());

const SCHEMA = fs.readFileSync(path.join(__dirname, '..', '..', 'docs', 'schema.md'), 'utf8');
const HEADINGS = { postgres: '## PostgreSQL', mysql: '## MySQL and MariaDB', sqlite: '## SQLite' };

/** The SQL block under `heading`, as its statements (without their final semicolons). */
function statementsUnder(heading) {
  const section = SCHEMA.slice(SCHEMA.indexOf(heading));
  const block = /```sql\n([\s\S]*?)```/.exec(section)[1];
  return block
    .split(';')
    .map((statement) => statement.trim())
    .filter((statement) => statement !== '');
}

describe.each(SQL_ENGINES)('docs/schema.md on $name', (engine) => {
  const made = tablesDroppedAfterAll(engine);

  test('the documented DDL passes doctor --no-auto-setup, and a transport without autoSetup uses it', async () => {
    const dsn = engine.dsn();
    const table = uniqueName('nmn_schema');
    made.push({ dsn, table });
    for (const statement of statementsUnder(HEADINGS[engine.name])) {
      await engine.exec(dsn, statement.replaceAll('messenger_messages', table));
    }
    const run = await runCli(['doctor', '--dsn', dsn, '--table', table, '--no-auto-setup', '--json']);
    const report = jsonOf(run);
    // A SQLite file made by hand is not in WAL mode yet: the transport switches it (a warning).
    const notOk = Object.entries(verdicts(report)).filter(([name, v]) => v !== 'ok' && name !== 'journal mode');
    expect(notOk).toEqual([]);
    expect(run.code).toBe(0);

    const t = new SqlTransport({ dsn, tableName: table, autoSetup: false, serializer: serializer() });
    try {
      await t.send(envelopeOf('migrated'));
      const received = await receiveOne(t, 5000);
      expect(received.message.id).toBe('migrated');
      await t.ack(received);
    } finally {
      await t.close();
    }
  });
});
