'use strict';

// `stats`, run as a child process, on every engine: exact ready / delayed / in-flight counts
// after sends, delayed sends, claims and acks through the transport; --json and text; --watch
// with what was added and removed between samples; and read-only (a missing table, file or
// stream is reported, never created).

const fs = require('node:fs');
const { spawn } = require('node:child_process');
const path = require('node:path');
const { DelayStamp } = require('@schally/nestjs-messenger');
const { SqlTransport, RedisStreamsTransport } = require('../..');
const { redis } = require('../../bench/engines');
const { envelopeOf, receiveUpTo, serializer } = require('../support/transport-helpers');
const { runCli, jsonOf, sqliteDsn, removeTemp, SQL_ENGINES, uniqueName } = require('./cli-support');

jest.setTimeout(30000);

afterAll(() => removeTemp());

/** Per engine: a transport on a target of its own, the CLI arguments naming it, the row name. */
const ENGINES = [
  ...SQL_ENGINES.map((sql) => ({
    name: sql.name,
    /** A queue of its own in the engine's table (one table per file). */
    open(queueName = uniqueName('jobs')) {
      const dsn = this.dsn ?? (this.dsn = sql.dsn());
      const table = this.table ?? (this.table = uniqueName('nmn_st'));
      const t = new SqlTransport({ dsn, tableName: table, queueName, serializer: serializer(), ackMode: 'commit' });
      return { t, args: ['--dsn', dsn, '--table', table, '--queue', queueName], row: queueName };
    },
    async cleanup() {
      if (this.table !== undefined) await sql.dropTable(this.dsn, this.table);
    },
    async exists(args) {
      return sql.tableExists(args[1], args[3]);
    },
  })),
  {
    name: 'redis',
    streams: [],
    /** A stream of its own. */
    open() {
      const stream = redis.uniqueStream('stats');
      this.streams.push(stream);
      const t = new RedisStreamsTransport({ dsn: redis.dsn, stream, serializer: serializer(), ackMode: 'commit' });
      return { t, args: ['--dsn', redis.dsn, '--stream', stream], row: `${stream}/messenger` };
    },
    async cleanup() {
      await redis.admin().del(this.streams.flatMap((stream) => [stream, `${stream}:delayed`]));
    },
    async exists(args) {
      return (await redis.admin().withClient((c) => c.exists(args[3]))) === 1;
    },
  },
];

/** Runs `stats … --watch <ms> --count 2 --json`; calls `between()` once the first sample is out. */
function watchTwice(args, ms, between) {
  return new Promise((resolve, reject) => {
    const bin = path.join(__dirname, '..', '..', 'bin', 'nestjs-messenger-native.js');
    const child = spawn(process.execPath, [bin, 'stats', ...args, '--watch', `${ms}ms`, '--count', '2', '--json']);
    let out = '';
    let err = '';
    let called = false;
    child.stderr.on('data', (chunk) => (err += chunk));
    child.stdout.on('data', (chunk) => {
      out += chunk;
      if (!called && out.includes('\n')) {
        called = true;
        between().catch(reject);
      }
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, lines: out.trim().split('\n').map((l) => JSON.parse(l)), stderr: err }));
  });
}

describe.each(ENGINES)('stats on $name', (engine) => {
  /** What the test holds (delivered, not settled): acked before close, which waits for them. */
  let held = [];
  let transports = [];
  afterEach(async () => {
    const [t] = transports;
    for (const envelope of held.splice(0)) await t.ack(envelope);
    for (const t of transports.splice(0)) await t.close();
  });
  afterAll(() => engine.cleanup());

  /** 5 sent and claimed, 2 of them acked; then 4 more and 3 delayed: 4 ready, 3 delayed, 3 in flight. */
  async function fill() {
    const { t, args, row } = engine.open();
    transports.push(t);
    await t.setup();
    for (let i = 0; i < 5; i += 1) await t.send(envelopeOf(`a${i}`));
    held = await receiveUpTo(t, 5, 5000);
    expect(held).toHaveLength(5);
    for (const envelope of held.splice(0, 2)) await t.ack(envelope);
    for (let i = 0; i < 4; i += 1) await t.send(envelopeOf(`b${i}`));
    for (let i = 0; i < 3; i += 1) await t.send(envelopeOf(`d${i}`).with(new DelayStamp(60000)));
    return { t, args, row };
  }

  test('ready, delayed and in flight are counted exactly (--json)', async () => {
    const { args, row } = await fill();
    const run = await runCli(['stats', ...args, '--json']);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const doc = jsonOf(run);
    expect(Object.keys(doc).sort()).toEqual(['at', 'queues']);
    expect(doc.queues).toEqual([
      { name: row, ready: 4, delayed: 3, inFlight: 3, oldestReadyAgeMs: expect.any(Number) },
    ]);
    expect(doc.queues[0].oldestReadyAgeMs).toBeGreaterThanOrEqual(0);
    expect(doc.queues[0].oldestReadyAgeMs).toBeLessThan(30000);
  });

  test('the text table has a header and one row per queue', async () => {
    const { args, row } = await fill();
    const run = await runCli(['stats', ...args]);
    expect(run.code).toBe(0);
    const lines = run.stdout.trim().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^queue +ready +delayed +in flight +oldest ready$/);
    expect(lines[1].split(/ {2,}/).slice(0, 4)).toEqual([row, '4', '3', '3']);
  });

  test('--watch reports what was added and removed between samples', async () => {
    const { t, args, row } = await fill();
    const { code, lines, stderr } = await watchTwice(args, 1500, async () => {
      for (let i = 0; i < 6; i += 1) await t.send(envelopeOf(`w${i}`));
      for (const envelope of held.splice(0)) await t.ack(envelope);
    });
    expect(stderr).toBe('');
    expect(code).toBe(0);
    expect(lines).toHaveLength(2);
    expect(lines[0].queues).toEqual([
      expect.objectContaining({ name: row, ready: 4, inFlight: 3, added: null, removed: null, inPerSec: null, outPerSec: null }),
    ]);
    const [second] = lines[1].queues;
    expect(second).toMatchObject({ name: row, ready: 10, delayed: 3, inFlight: 0, added: 6, removed: 3 });
    expect(second.inPerSec).toBeGreaterThan(0);
    expect(second.outPerSec).toBeCloseTo((second.inPerSec * 3) / 6, 5);
  });

  test('a missing table or stream is reported (exit 1) and not created', async () => {
    const { args } = engine.open();
    const missing = [...args];
    missing[3] = engine.name === 'redis' ? redis.uniqueStream('absent') : uniqueName('nmn_none');
    if (engine.name === 'sqlite') missing[1] = sqliteDsn('absent');
    const run = await runCli(['stats', ...missing]);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/^stats: .*(does not exist)/);
    // The message alone, not the envelope it crossed from the native side in.
    expect(run.stderr).not.toMatch(/^stats: [[{]/);
    if (engine.name === 'sqlite') expect(fs.existsSync(missing[1].slice('sqlite://'.length))).toBe(false);
    else expect(await engine.exists(missing)).toBe(false);
  });
});

describe('stats on SQL: queues of one table', () => {
  test('one row per queue in name order; --queue keeps one', async () => {
    const dsn = sqliteDsn('queues');
    const table = uniqueName('nmn_q');
    const make = (queueName) => new SqlTransport({ dsn, tableName: table, queueName, serializer: serializer() });
    const [a, b] = [make('alpha'), make('beta')];
    try {
      await a.setup();
      await a.send(envelopeOf('x'));
      for (let i = 0; i < 2; i += 1) await b.send(envelopeOf(`y${i}`).with(new DelayStamp(60000)));
      const all = jsonOf(await runCli(['stats', '--dsn', dsn, '--table', table, '--json']));
      expect(all.queues.map((q) => [q.name, q.ready, q.delayed, q.inFlight])).toEqual([
        ['alpha', 1, 0, 0],
        ['beta', 0, 2, 0],
      ]);
      expect(all.queues[1].oldestReadyAgeMs).toBeNull();
      const one = jsonOf(await runCli(['stats', '--dsn', dsn, '--table', table, '--queue', 'beta', '--json']));
      expect(one.queues.map((q) => q.name)).toEqual(['beta']);
    } finally {
      await a.close();
      await b.close();
    }
  });
});
