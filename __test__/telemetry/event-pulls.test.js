'use strict';

// The events of idle transports are pulled on one beat: transports opened one after the other,
// tens of milliseconds apart, have their pulls run together, once a period, in one wake-up of
// the process, not each on a timer of its own (hundreds of idle transports would otherwise wake
// the process hundreds of times a second). A closed transport is pulled once more, then never.

const { EventLog } = require('../../lib/telemetry/event-log');
const { sqlite } = require('../support/engines');
const { serializer, sleep } = require('../support/transport-helpers');

const TRANSPORTS = 12;
const OPENED_APART_MS = 35;
/** Pulls closer together than this ran in one wake-up (they take microseconds each). */
const ONE_WAKE_UP_MS = 10;

/** A logger, so that each transport has an event log, that prints nothing. */
const SILENT = { log() {}, warn() {}, error() {} };

/** Records when each log is pulled (by its own timer) while `during` runs. */
async function pullsDuring(during) {
  const pulls = [];
  const drain = EventLog.prototype.drain;
  EventLog.prototype.drain = function recordedDrain() {
    pulls.push({ at: performance.now() });
    return drain.call(this);
  };
  try {
    await during();
  } finally {
    EventLog.prototype.drain = drain;
  }
  return pulls;
}

/** The wake-ups of `pulls` (in time order): runs of pulls with gaps under ONE_WAKE_UP_MS. */
function wakeUps(pulls) {
  const runs = [];
  for (const pull of pulls) {
    const last = runs.at(-1);
    if (last !== undefined && pull.at - last.at(-1).at < ONE_WAKE_UP_MS) last.push(pull);
    else runs.push([pull]);
  }
  return runs;
}

describe('events of idle transports', () => {
  it(`${TRANSPORTS} transports opened ${OPENED_APART_MS} ms apart are pulled together, once a period`, async () => {
    const dsn = sqlite.temporaryDsn('nmn-pulls');
    const transports = [];
    const pulls = await pullsDuring(async () => {
      for (let i = 0; i < TRANSPORTS; i += 1) {
        transports.push(new sqlite.Transport({ dsn, serializer: serializer(), queueName: `q${i}`, logger: SILENT }));
        await sleep(OPENED_APART_MS);
      }
      await sleep(2200);
    });
    // Once every transport is on the beat (from the second beat after the last was opened).
    const settled = wakeUps(pulls).slice(-3);
    expect(settled.map((run) => run.length)).toEqual([TRANSPORTS, TRANSPORTS, TRANSPORTS]);
    const apart = settled.slice(1).map((run, i) => run[0].at - settled[i][0].at);
    for (const ms of apart) expect(ms).toBeGreaterThan(400);

    const afterClose = await pullsDuring(async () => {
      await Promise.all(transports.map((transport) => transport.close()));
      await sleep(1200);
    });
    // close() pulls once more, then never again.
    expect(afterClose.length).toBe(TRANSPORTS);
  }, 15000);
});
