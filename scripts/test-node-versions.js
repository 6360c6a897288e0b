'use strict';

// Runs a stated part of the jest suites on newer Node.js majors, after `npm test` has run all
// of them on the Node.js that runs it. The addon is the one `npm test` built: nothing is built
// here. Each major's `node` comes from the npm registry's `node` package, installed once into a
// cache outside git (.cache/node-versions/<major>; NODE_VERSIONS_CACHE names another) and reused
// while it answers with that major. Every run prints the exact Node.js version it used and its
// time; a failure on any major fails the script (after the others have run).
//
//   node scripts/test-node-versions.js           every major in MAJORS
//   node scripts/test-node-versions.js 24 26     only these
//   node scripts/test-node-versions.js --list    print what runs where, run nothing

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const ROOT = path.resolve(__dirname, '..');
const CACHE = path.resolve(ROOT, process.env.NODE_VERSIONS_CACHE ?? path.join('.cache', 'node-versions'));
const JEST = path.join(ROOT, 'node_modules', 'jest', 'bin', 'jest.js');

/** The majors tested here, beside the one that runs `npm test` (which runs every suite). */
const MAJORS = ['22', '24', '26'];

/**
 * What runs on them: each group on every major, unless `majors` names fewer. The Node.js-only
 * parts of the addon are all here: the send path served on the host's event loop, worker
 * threads, finalizers and process exit.
 */
const SUITES = [
  {
    what: "every engine's transport suite and the core's 17 conformance scenarios",
    paths: [
      '__test__/sql/postgres.transport.test.js',
      '__test__/sql/mysql.transport.test.js',
      '__test__/sql/sqlite.transport.test.js',
      '__test__/redis/redis.transport.test.js',
      '__test__/sql/postgres.conformance.test.js',
      '__test__/sql/mysql.conformance.test.js',
      '__test__/sql/sqlite.conformance.test.js',
      '__test__/redis/redis.conformance.test.js',
    ],
  },
  {
    what: "the direct send path (Redis sends written and read on the host's libuv loop)",
    paths: ['__test__/redis/redis.direct-sends.test.js', '__test__/transports/send-settling.test.js', '__test__/hosts/host.test.js'],
  },
  {
    what: 'the transports as guests: send backlog, keepalive, the app\'s sockets, the runtime',
    paths: [
      '__test__/transports/send-backlog.test.js',
      '__test__/transports/keepalive.test.js',
      '__test__/transports/app-sockets.test.js',
      '__test__/transports/runtime.test.js',
    ],
  },
  {
    what: 'lifecycle: worker threads, exit with pending acks, close, SIGTERM under Nest',
    paths: [
      '__test__/lifecycle/worker-threads.test.js',
      '__test__/lifecycle/write-behind-exit.test.js',
      '__test__/lifecycle/close-unwritten-acks.test.js',
      '__test__/lifecycle/nest-sigterm.test.js',
    ],
  },
  {
    // About 5 minutes a run: on the newest major only, whose V8 and finalizers differ most from
    // the Node.js that runs npm test.
    what: 'lifecycle: memory flat and no native queue left over 17,000 transports',
    paths: ['__test__/lifecycle/many-transports.test.js'],
    majors: ['26'],
  },
  {
    what: 'Bun and Deno smoke (and the same script under this Node.js)',
    paths: ['__test__/hosts/bun-deno.test.js'],
  },
];

/** The suite paths that run on `major`. */
function suitesFor(major) {
  return SUITES.filter((suite) => suite.majors === undefined || suite.majors.includes(major)).flatMap((suite) => suite.paths);
}

/** The version `bin` reports (`22.23.3`), or undefined when it does not run. */
function versionOf(bin) {
  if (!fs.existsSync(bin)) return undefined;
  const result = spawnSync(bin, ['-p', 'process.versions.node'], { encoding: 'utf8' });
  return result.status === 0 ? result.stdout.trim() : undefined;
}

/**
 * The `node` binary of `major`, installed from the npm registry into the cache when the cache
 * has none that answers with that major.
 * @returns {{ bin: string, version: string, installedMs: number }}
 */
function nodeOf(major) {
  const prefix = path.join(CACHE, major);
  const bin = path.join(prefix, 'node_modules', '.bin', 'node');
  const cached = versionOf(bin);
  if (cached?.startsWith(`${major}.`)) return { bin, version: cached, installedMs: 0 };
  const started = Date.now();
  fs.rmSync(prefix, { recursive: true, force: true });
  fs.mkdirSync(prefix, { recursive: true });
  process.stdout.write(`node-versions: installing node@${major} into ${path.relative(ROOT, prefix)}\n`);
  const install = spawnSync(
    'npm',
    ['install', '--prefix', prefix, '--no-save', '--no-package-lock', '--no-audit', '--no-fund', '--loglevel', 'error', `node@${major}`],
    { cwd: prefix, stdio: 'inherit' },
  );
  const version = versionOf(bin);
  if (install.status !== 0 || !version?.startsWith(`${major}.`)) {
    throw new Error(`npm install node@${major} gave no working node ${major}.x at ${bin} (npm exit ${install.status}, version ${version})`);
  }
  return { bin, version, installedMs: Date.now() - started };
}

/**
 * Runs the suites of `major` with its node; the outcome, with jest's counts.
 * @returns {{ major: string, version?: string, ok: boolean, seconds: number, installSeconds: number, detail: string }}
 */
function runMajor(major) {
  let node;
  try {
    node = nodeOf(major);
  } catch (error) {
    return { major, ok: false, seconds: 0, installSeconds: 0, detail: error.message };
  }
  const paths = suitesFor(major);
  const missing = paths.filter((file) => !fs.existsSync(path.join(ROOT, file)));
  if (missing.length > 0) return { major, ok: false, seconds: 0, installSeconds: 0, detail: `no such suite: ${missing.join(', ')}` };
  const reportDir = fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-node-versions-'));
  const report = path.join(reportDir, 'jest.json');
  process.stdout.write(`\nnode-versions: Node.js v${node.version} (${node.bin}): ${paths.length} suite files\n`);
  const started = Date.now();
  const run = spawnSync(node.bin, [JEST, '--runInBand', '--json', '--outputFile', report, ...paths], {
    cwd: ROOT,
    stdio: 'inherit',
    // Children started as `node` (not by process.execPath) get the same version.
    env: { ...process.env, PATH: `${path.dirname(node.bin)}${path.delimiter}${process.env.PATH}` },
  });
  const seconds = Math.round((Date.now() - started) / 1000);
  let ok = run.status === 0;
  let detail = `jest exit ${run.status ?? run.signal}`;
  if (fs.existsSync(report)) {
    const counts = JSON.parse(fs.readFileSync(report, 'utf8'));
    detail = `${counts.numTotalTestSuites} files, ${counts.numPassedTests} tests passed, ${counts.numFailedTests} failed`;
    if (counts.numTotalTestSuites !== paths.length) {
      ok = false;
      detail += ` (expected ${paths.length} files)`;
    }
  }
  fs.rmSync(reportDir, { recursive: true, force: true });
  return { major, version: node.version, ok, seconds, installSeconds: Math.round(node.installedMs / 1000), detail };
}

function printPlan() {
  for (const suite of SUITES) {
    process.stdout.write(`${suite.what}\n  on Node.js ${(suite.majors ?? MAJORS).join(', ')}\n`);
    for (const file of suite.paths) process.stdout.write(`    ${file}\n`);
  }
}

function main(argv) {
  if (argv.includes('--list')) {
    printPlan();
    return 0;
  }
  const majors = argv.length > 0 ? argv : MAJORS;
  const unknown = majors.filter((major) => !/^\d+$/.test(major));
  if (unknown.length > 0) throw new Error(`not a Node.js major: ${unknown.join(', ')}`);
  const outcomes = majors.map(runMajor);
  process.stdout.write('\nnode-versions: summary\n');
  for (const o of outcomes) {
    const install = o.installSeconds > 0 ? `, installed in ${o.installSeconds} s` : '';
    process.stdout.write(`  Node.js ${o.version ? `v${o.version}` : o.major}: ${o.ok ? 'passed' : 'FAILED'}, ${o.detail}, ${o.seconds} s${install}\n`);
  }
  return outcomes.every((o) => o.ok) ? 0 : 1;
}

if (require.main === module) {
  process.exitCode = main(process.argv.slice(2));
}

module.exports = { MAJORS, SUITES, suitesFor };
