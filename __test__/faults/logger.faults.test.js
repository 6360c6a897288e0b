'use strict';

// The `logger` option when connections really drop, on a private server: the
// logger of an idle consumer hears that the connection was lost and that it is back —
// PostgreSQL's LISTEN connection when every backend is killed, a Redis consumer's connection
// when its client is killed, a MariaDB consumer's when the server restarts — and consuming
// goes on.

const { privateServer } = require('./support/servers');
const { makeTransport, uniqueQueue } = require('./support/engines');
const { sleep } = require('./support/account');
const { faultEnvelope } = require('./support/messages');
const { pollUntil, startAckingConsumer } = require('../support/transport-helpers');

const EXPECTED = {
  postgres: { lost: /^LISTEN connection lost/, back: /^LISTEN connection back/ },
  mariadb: { lost: /^Connection lost: .*get\(\) keeps trying\.$/, back: /^Connection back/ },
  redis: { lost: /^Connection lost: .*get\(\) keeps trying\.$/, back: /^Connection back/ },
};

describe.each(['postgres', 'mariadb', 'redis'])('%s: the logger hears of a lost connection', (engine) => {
  const serverOf = privateServer(engine);

  it('lost, then back; consuming goes on', async () => {
    const server = serverOf();
    const lines = [];
    const at = (level) => (message, context) => lines.push({ level, message, context });
    const logger = { log: at('log'), warn: at('warn'), error: at('error') };
    const queue = uniqueQueue(engine, 'logger');
    const consumer = makeTransport(engine, { dsn: server.dsn, queue, connectTimeoutMs: 1000, logger });
    const producer = makeTransport(engine, { dsn: server.dsn, queue, connectTimeoutMs: 1000 });
    const reading = startAckingConsumer(consumer);
    try {
      await producer.setup();
      await sleep(800);
      if (engine === 'mariadb') await server.restart({ downMs: 1500 });
      else await server.killBackends();

      const { lost, back } = EXPECTED[engine];
      const heard = (pattern) => lines.find((l) => pattern.test(l.message));
      expect(await pollUntil(() => heard(lost), { timeoutMs: 5000 })).toMatchObject({ level: 'warn' });
      expect(await pollUntil(() => heard(back), { timeoutMs: 10_000 })).toMatchObject({ level: 'log' });
      expect(lines.indexOf(heard(lost))).toBeLessThan(lines.indexOf(heard(back)));
      console.log(`[logger ${engine}] ${lines.map((l) => `${l.level}: ${l.message}`).join(' / ')}`);

      // Consuming goes on: a message sent now is delivered.
      await producer.send(faultEnvelope('after', 1));
      expect(await pollUntil(() => reading.received.some((e) => e.message.key === 'after'), { timeoutMs: 10_000 })).toBe(true);
    } finally {
      await reading.stop();
      await producer.close();
      await consumer.close();
    }
  }, 60_000);
});
