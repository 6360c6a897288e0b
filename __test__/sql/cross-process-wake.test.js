'use strict';

// Wake-ups across processes on the engines without LISTEN/NOTIFY: a consumer idling in another
// process, its poll a minute away, receives a message this process sends within seconds (MariaDB:
// the send ends the consumer process's sleeping wait; SQLite: the file changes under its watch).
// How fast is the benchmark's (B4 from another process); here, only that it is pushed at all.
// A sender that only inserts (the TypeScript transport) is delivered by the poll: see the
// mixed-fleet suites.

const path = require('node:path');
const fs = require('node:fs');
const { fork } = require('node:child_process');
const { SqlTransport } = require('../..');
const { mysql, sqlite, uniqueName } = require('../support/engines');
const { processMessageSerializer, processEnvelope } = require('../support/sqlite-consumer');

const CONSUMER_SCRIPT = path.join(__dirname, '..', 'support', 'sqlite-consumer.js');
/** Far longer than the test waits: only a push can wake the consumer in time. */
const POLL_MS = 60_000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const ENGINES = [
  ['MariaDB', async () => { await mysql.requireServer(); return { dsn: mysql.dsn, cleanup: () => {} }; }],
  [
    'SQLite',
    async () => {
      const dsn = sqlite.temporaryDsn('nmn-xwake');
      return { dsn, cleanup: () => fs.rmSync(path.dirname(dsn.slice('sqlite://'.length)), { recursive: true, force: true }) };
    },
  ],
];

describe.each(ENGINES)('%s: a consumer idle in another process', (_label, target) => {
  it('is woken by a send from this process, its poll a minute away', async () => {
    const { dsn, cleanup } = await target();
    const queueName = uniqueName('nmn_xwake');
    const child = fork(CONSUMER_SCRIPT, [], {
      cwd: path.join(__dirname, '..', '..'),
      execArgv: [],
      silent: true,
      env: { ...process.env, CONSUMER_DSN: dsn, CONSUMER_QUEUE: queueName, CONSUMER_POLL_MS: String(POLL_MS), CONSUMER_IDLE_EXIT_MS: '60000' },
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const got = [];
    const ready = new Promise((resolve) => child.on('message', (m) => (m.type === 'ready' ? resolve() : m.type === 'got' && got.push(m))));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    const sender = new SqlTransport({ dsn, queueName, serializer: processMessageSerializer() });
    try {
      await ready;
      child.send({ type: 'start' });
      // Its first claim finds nothing; it then idles on the table's poll.
      await sleep(1500);
      const sentAt = Date.now();
      await sender.send(processEnvelope(1));
      while (got.length === 0 && Date.now() - sentAt < 10_000) await sleep(20);
      expect({ got: got.map((m) => m.n), output }).toEqual({ got: [1], output: '' });
    } finally {
      child.send({ type: 'stop' });
      await Promise.race([exited, sleep(5000)]);
      if (child.exitCode === null) child.kill('SIGKILL');
      await sender.close();
      cleanup();
    }
  }, 30_000);
});
