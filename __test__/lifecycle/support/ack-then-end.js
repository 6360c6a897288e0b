'use strict';

// A consumer process that acks (write-behind) and then simply runs out of work: no close(), no
// process.exit(). Forked with an IPC channel and KIND, DSN, TARGET (JSON) and COUNT. It sends
// COUNT messages, takes them all without acking, says { consumed }, and on the parent's 'ack'
// acks them all, lets go of the IPC channel and returns: from then on only the transport can
// keep the process alive.

const { SqlTransport, RedisStreamsTransport } = require('../../..');
const { jobSerializer, sendThenTakeAll } = require('../../support/jobs');

async function main() {
  const Transport = process.env.KIND === 'redis' ? RedisStreamsTransport : SqlTransport;
  const count = Number(process.env.COUNT);
  const transport = new Transport({
    dsn: process.env.DSN,
    ...JSON.parse(process.env.TARGET),
    serializer: jobSerializer(),
    ackMode: 'write-behind',
    ...JSON.parse(process.env.OPTIONS ?? '{}'),
  });
  const taken = await sendThenTakeAll(transport, count);
  await new Promise((resolve) => {
    process.once('message', resolve);
    process.send({ consumed: taken.length });
  });
  for (const envelope of taken) await transport.ack(envelope);
  process.disconnect();
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
  if (process.connected) process.disconnect();
});
