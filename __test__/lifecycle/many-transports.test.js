'use strict';

// A transport let go of lets go of everything: transports created, used and let go of one after
// the other in one process, per engine, leave the process's memory flat (at most 1 KB per cycle
// over 10,000 cycles after a warm-up of 7,000 in which the allocators settle, measured after
// full GCs as the RSS less the free room in V8's heap: see support/create-and-close.js) and no
// native queue alive at the end. Three shapes: closed after one send; dropped
// without close() after one send; and (Redis) a consumer idle in the process's shared read beside
// five others, woken by a send, then closed. Each runs in a child process of its own
// (--expose-gc), which must also exit by itself.

const path = require('node:path');
const { spawn } = require('node:child_process');
const { postgres, mysql, sqlite, redis, requireServer, uniqueName } = require('../../bench/engines');
const { settleWithin } = require('../faults/support/account');

const SCRIPT = path.join(__dirname, 'support', 'create-and-close.js');
const CYCLES = 17_000;
const MAX_BYTES_PER_CYCLE = 1024;

const ENGINES = [
  { engine: postgres, kind: 'sql', target: () => ({ tableName: uniqueName('nmn_many'), queueName: 'q' }) },
  { engine: mysql, kind: 'sql', target: () => ({ tableName: uniqueName('nmn_many'), queueName: 'q' }) },
  { engine: sqlite, kind: 'sql', dsn: () => sqlite.temporaryDsn('nmn-many'), target: () => ({ queueName: 'q' }) },
  { engine: redis, kind: 'redis', target: () => ({ stream: redis.uniqueStream('many') }) },
];
const CASES = [
  ...ENGINES.map((c) => ({ ...c, shape: 'closed' })),
  ...ENGINES.map((c) => ({ ...c, shape: 'dropped' })),
  { ...ENGINES[3], shape: 'woken' },
];

describe.each(CASES)('$engine.label: 17,000 transports created, used and let go ($shape)', ({ engine, kind, dsn: dsnOf, target: targetOf, shape }) => {
  it('leave memory flat and no native queue behind', async () => {
    await requireServer(engine);
    const dsn = dsnOf ? dsnOf() : engine.dsn;
    const target = targetOf();
    const child = spawn(process.execPath, ['--expose-gc', SCRIPT], {
      env: { ...process.env, KIND: kind, DSN: dsn, TARGET: JSON.stringify(target), CYCLES: String(CYCLES), SHAPE: shape },
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const exit = await settleWithin(new Promise((resolve) => child.once('exit', (code, signal) => resolve(signal ?? code))), 170_000);
    try {
      if (exit.timeout) throw new Error(`the process did not finish within 170 s:\n${output}`);
      const report = JSON.parse(output.trim().split('\n').pop());
      console.log(`${engine.label} (${shape}): ${report.bytesPerCycle} B held per cycle (RSS: ${report.rssBytesPerCycle} B), ${report.finalized} finalized, ${report.liveNativeQueues} native queues alive`);
      expect({ exit: exit.value, finalized: report.finalized, liveNativeQueues: report.liveNativeQueues }).toEqual({
        exit: 0,
        finalized: expect.any(Number),
        liveNativeQueues: 0,
      });
      // Everything but the last few transports (not yet collected by the last GC) is finalized.
      expect(report.finalized).toBeGreaterThan(CYCLES - 10);
      expect(report.bytesPerCycle).toBeLessThanOrEqual(MAX_BYTES_PER_CYCLE);
    } catch (error) {
      error.message += `\nchild output:\n${output}`;
      throw error;
    } finally {
      child.kill('SIGKILL');
      if (engine.kind === 'sql' && engine.server) await engine.admin().dropTable(target.tableName, { ifExists: true });
      if (kind === 'redis') {
        const idle = Array.from({ length: 5 }, (_, i) => `${target.stream}:idle${i}`);
        await engine.admin().withClient((client) => client.del(target.stream, ...idle));
      }
    }
  }, 180_000);
});
