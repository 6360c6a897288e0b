'use strict';

// What B2 and B3 measure beside what an app's sends cost: the same sends made several ways,
// native and upstream alternately, each run in a fresh process (run-one.js) on a fresh queue,
// so the difference between the benchmark's figures and an app's can be put down to its
// causes: the envelope's stamps (an app's bus adds two, and they travel), how long the run
// is (a short run is mostly the JIT warming up), a warm-up before the clock starts, and
// whether the native Redis sends take the path served on the JavaScript thread.
//
//   node bench/app-sends.js [--engines redis,mysql] [--rounds 3] [--n 20000]
//                           [--workloads sendSequential,sendConcurrent]

const { parseArgs } = require('node:util');
const { Envelope, BusNameStamp, SentStamp } = require('@schally/nestjs-messenger');
const { ENGINES } = require('./engines');
const { runFresh } = require('./child');
const { median } = require('./report');
const { BenchMessage, serializer } = require('./message');

/** The variants: what each changes from the benchmark's former B2/B3 (bare, short, one warm-up). */
function variants(n) {
  const count = n.toLocaleString('en-US');
  return [
    { label: 'former B2/B3: no stamps, 2,000 / 5,000 sends', shape: 'bare', n: { sendSequential: 2000, sendConcurrent: 5000 } },
    { label: 'app stamps, 2,000 / 5,000 sends', shape: 'app', n: { sendSequential: 2000, sendConcurrent: 5000 } },
    { label: `app stamps, ${count} sends`, shape: 'app', n: { sendSequential: n, sendConcurrent: n } },
    { label: `app stamps, ${count} sends after ${(n / 10).toLocaleString('en-US')} warm-up sends`, shape: 'app', n: { sendSequential: n, sendConcurrent: n }, warmUp: n / 10 },
    {
      label: `app stamps, ${count} sends, native direct send path off`,
      shape: 'app',
      n: { sendSequential: n, sendConcurrent: n },
      env: { NESTJS_MESSENGER_NATIVE_DIRECT_SENDS: '0' },
      only: 'redis',
    },
  ];
}

/** Bytes an envelope of each shape stores (body, headers), for the report. */
function sizes() {
  const encode = (envelope) => {
    const encoded = serializer().encode(envelope);
    return { body: Buffer.byteLength(encoded.body), headers: Buffer.byteLength(JSON.stringify(encoded.headers)) };
  };
  const message = new BenchMessage('c-12345', 0);
  return {
    bare: encode(new Envelope(message)),
    app: encode(new Envelope(message, [new BusNameStamp('default'), new SentStamp('RedisStreamsTransport', 'async')])),
  };
}

async function main() {
  const { values } = parseArgs({
    options: {
      engines: { type: 'string', default: 'redis,mysql' },
      rounds: { type: 'string', default: '3' },
      n: { type: 'string', default: '20000' },
      workloads: { type: 'string', default: 'sendSequential,sendConcurrent' },
    },
    strict: true,
  });
  const engines = values.engines.split(',').filter((engine) => ENGINES[engine]?.upstream === true);
  const rounds = Number(values.rounds);
  const n = Number(values.n);
  const workloads = values.workloads.split(',').filter((workload) => workload === 'sendSequential' || workload === 'sendConcurrent');
  const results = {};
  for (let round = 1; round <= rounds; round += 1) {
    for (const engine of engines) {
      for (const [v, variant] of variants(n).entries()) {
        if (variant.only !== undefined && variant.only !== engine) continue;
        for (const workload of workloads) {
          for (const impl of variant.env === undefined ? ['native', 'upstream'] : ['native']) {
            const job = { engine, impl, workload, n: variant.n[workload], shape: variant.shape, warmUp: variant.warmUp ?? 1 };
            const result = runFresh('run-one.js', job, { ...process.env, ...variant.env });
            process.stderr.write(`round ${round} ${engine} ${workload} ${impl} [${variant.label}]: ${JSON.stringify(result)}\n`);
            (((results[engine] ??= {})[v] ??= {})[workload] ??= {})[impl] ??= [];
            results[engine][v][workload][impl].push(result);
          }
        }
      }
    }
  }
  const s = sizes();
  const lines = [
    `Stored bytes per message (body + headers): no stamps ${s.bare.body} + ${s.bare.headers}; an app's (BusNameStamp, SentStamp) ${s.app.body} + ${s.app.headers}.`,
    '',
    '| engine | workload | variant | native sends/s | upstream sends/s | native ÷ upstream | process CPU µs/send native / upstream | main-thread CPU µs/send native / upstream | direct send connections |',
    '|---|---|---|---|---|---|---|---|---|',
  ];
  for (const engine of engines) {
    for (const workload of workloads) {
      for (const [v, variant] of variants(n).entries()) {
        const runs = results[engine]?.[v]?.[workload];
        if (runs === undefined) continue;
        const of = (impl, key) => median((runs[impl] ?? []).map((r) => r[key]));
        const ratio = of('native', 'rate') / of('upstream', 'rate');
        const f = (value, digits = 0) => (Number.isFinite(value) ? value.toFixed(digits) : '–');
        lines.push(
          `| ${engine} | ${workload === 'sendSequential' ? 'B2 sequential' : 'B3 64 in flight'} | ${variant.label} | ${f(of('native', 'rate'))} | ${f(of('upstream', 'rate'))} | ${Number.isFinite(ratio) ? `${ratio.toFixed(2)}×` : '–'} | ${f(of('native', 'processCpuPerMessage'), 1)} / ${f(of('upstream', 'processCpuPerMessage'), 1)} | ${f(of('native', 'mainCpuPerMessage'), 1)} / ${f(of('upstream', 'mainCpuPerMessage'), 1)} | ${f(of('native', 'directSendConnections'))} |`,
        );
      }
    }
  }
  process.stdout.write(`${lines.join('\n')}\n`);
}

main().catch((error) => {
  process.stderr.write(`${error.stack ?? error}\n`);
  process.exitCode = 1;
});
