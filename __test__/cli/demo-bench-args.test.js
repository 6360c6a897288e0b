'use strict';

// The demo's and the benchmark's command lines, parsed strictly like the CLI's: `--name=value`
// works, a missing value or an unknown option is an error (never a silent default, never the
// next option taken as the value).

const demo = require('../../demo/args');
const bench = require('../../bench/args');
const { ENGINES } = require('../../bench/engines');

describe('demo arguments', () => {
  const env = {};

  test('the defaults: a new SQLite file, 3000 messages', () => {
    const options = demo.parseArgs([], env);
    expect(options).toMatchObject({ help: false, messages: 3000, delayed: 0.1, failing: 0.05 });
    expect(options.dsn).toMatch(/^sqlite:\/\//);
  });

  test('--name value and --name=value', () => {
    expect(demo.parseArgs(['--dsn', 'redis://127.0.0.1:6379', '--messages=10', '--delayed', '0', '--failing=1'], env)).toEqual({
      help: false,
      dsn: 'redis://127.0.0.1:6379',
      messages: 10,
      delayed: 0,
      failing: 1,
    });
  });

  test('MESSENGER_DSN when --dsn is not given', () => {
    expect(demo.parseArgs([], { MESSENGER_DSN: 'redis://127.0.0.1:6379' }).dsn).toBe('redis://127.0.0.1:6379');
  });

  test('-h and --help', () => {
    expect(demo.parseArgs(['-h'], env)).toEqual({ help: true });
    expect(demo.parseArgs(['--help'], env)).toEqual({ help: true });
  });

  test.each([
    [['--dsn'], /argument missing/],
    [['--messages', '0'], /--messages must be a positive integer/],
    [['--messages', '2.5'], /--messages must be a positive integer/],
    [['--delayed', '1.5'], /--delayed must be a number between 0 and 1/],
    [['--failing', ''], /--failing must be a number between 0 and 1/],
    [['--frobnicate'], /Unknown option/],
    [['extra'], /positional/],
  ])('%j is an error', (argv, message) => {
    expect(() => demo.parseArgs(argv, env)).toThrow(message);
  });
});

describe('bench arguments', () => {
  test('the defaults: 3 rounds of every engine, depth 100000, no soak, limits, B6 and B7', () => {
    expect(bench.parseArgs([])).toEqual({
      help: false,
      rounds: 3,
      engines: Object.keys(ENGINES),
      deep: 100000,
      soak: 0,
      limits: true,
      processes: [1, 2, 4, 8],
      scaleMessages: 20000,
      queues: [50, 200],
      idleMs: 10000,
      scale: true,
    });
  });

  test('the B6 and B7 options: lists of counts, each once, and --no-scale', () => {
    expect(
      bench.parseArgs(['--processes', '2, 4,4', '--scale-messages=500', '--queues', '10', '--idle-ms', '0', '--no-scale']),
    ).toMatchObject({ processes: [2, 4], scaleMessages: 500, queues: [10], idleMs: 0, scale: false });
  });

  test('what `npm run bench:quick` passes, and the rest', () => {
    expect(bench.parseArgs(['--rounds', '1', '--deep', '0'])).toMatchObject({ rounds: 1, deep: 0 });
    expect(bench.parseArgs(['--engines=postgres,redis', '--soak', '5000', '--no-limits'])).toMatchObject({
      engines: ['postgres', 'redis'],
      soak: 5000,
      limits: false,
    });
  });

  test.each([
    [['--soak', '--rounds', '1'], /ambiguous/],
    [['--rounds'], /argument missing/],
    [['--rounds', '0'], /--rounds must be an integer ≥ 1/],
    [['--deep', 'lots'], /--deep must be an integer ≥ 0/],
    [['--engines', 'postgres,oracle'], /--engines takes/],
    [['--processes', '1,,8'], /--processes takes integers ≥ 1 separated by commas/],
    [['--processes', '0'], /--processes must be an integer ≥ 1/],
    [['--queues', 'many'], /--queues must be an integer ≥ 1/],
    [['--scale-messages', '0'], /--scale-messages must be an integer ≥ 1/],
    [['--idle-ms=-1'], /--idle-ms must be an integer ≥ 0/],
    [['--frobnicate'], /Unknown option/],
  ])('%j is an error', (argv, message) => {
    expect(() => bench.parseArgs(argv)).toThrow(message);
  });
});
