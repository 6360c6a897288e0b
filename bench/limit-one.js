'use strict';

// One engine-limit or wake-up floor measurement in a process of its own, started cold exactly
// as a workload run (run-one.js) is, so the engine's own client is set against the transport
// on equal terms (no JIT or connection warmed by the runs before it). The parent passes a
// JSON job as argv[2] and reads one JSON line from stdout:
// { kind: 'limit', engine, depth, batch }, { kind: 'floor', engine } or
// { kind: 'roundTrip', engine: 'redis' }.

const { ownStatementsLimit } = require('./limits');
const { wakeFloor } = require('./limit-wake');
const { redisRoundTripFloor } = require('./limit-round-trip');

/** What each kind of job measures. */
const MEASURES = {
  limit: (job) => ownStatementsLimit(job.engine, job.depth, job.batch),
  floor: (job) => wakeFloor(job.engine),
  roundTrip: () => redisRoundTripFloor(),
};

async function main() {
  const job = JSON.parse(process.argv[2]);
  const result = await MEASURES[job.kind](job);
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error.stack ?? error}\n`);
    process.exit(1);
  },
);
