#!/usr/bin/env node
'use strict';

// `npm run test:nest`: the NestJS-facing tests against NestJS 10, 11 and 12 (the Logger and
// ConsoleLogger adapter, the default logger, the @nestjs/terminus indicator, shutdown hooks).
// Each major's packages (@nestjs/common, @nestjs/core, @nestjs/terminus of the same major,
// reflect-metadata, rxjs) are installed once into .cache/nest-versions/<major> (gitignored;
// reused while its manifest asks for the same ranges), never into the repository's own
// node_modules, where they would conflict. The same test files then run under `node --test`
// (jest cannot load the ES-module-only NestJS 12), with support/nest-from-prefix.js preloaded so
// that `@nestjs/*` resolves from that install. Prints the versions each run used and a summary;
// exits non-zero if any run failed.
//
//   node scripts/test-nest-versions.js [--only 12] [--update]
//     --only <major>  run one major (repeatable)
//     --update        reinstall, taking the latest versions of each range

const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const ROOT = path.resolve(__dirname, '..');
const CACHE = path.join(ROOT, '.cache', 'nest-versions');
const PRELOAD = path.join(ROOT, '__test__', 'support', 'nest-from-prefix.js');

/** The test files, run by jest too (with the repository's NestJS). */
const TEST_FILES = [
  '__test__/telemetry/nest-logger.test.js',
  '__test__/telemetry/nest-default-logger.test.js',
  '__test__/telemetry/terminus.test.js',
  '__test__/lifecycle/nest-sigterm.test.js',
];

/**
 * What each major installs. @nestjs/terminus follows NestJS's majors: 10 supports Nest 9–10,
 * 11 supports 10–11, 12 supports 11–12; each run takes the terminus of its own major.
 */
const MAJORS = [10, 11, 12];
const dependenciesOf = (major) => ({
  '@nestjs/common': `^${major}.0.0`,
  '@nestjs/core': `^${major}.0.0`,
  '@nestjs/terminus': `^${major}.0.0`,
  'reflect-metadata': '^0.2.0',
  rxjs: '^7.8.0',
});

function parseArgs(argv) {
  const options = { only: [], update: false };
  for (let i = 0; i < argv.length; i += 1) {
    if (argv[i] === '--only') options.only.push(Number(argv[++i]));
    else if (argv[i] === '--update') options.update = true;
    else throw new Error(`unknown argument ${argv[i]} (--only <major>, --update)`);
  }
  const unknown = options.only.filter((major) => !MAJORS.includes(major));
  if (unknown.length > 0) throw new Error(`--only takes ${MAJORS.join(', ')}`);
  return options;
}

/** The version of `name` installed under `dir`, or undefined. */
function installedVersion(dir, name) {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, 'node_modules', name, 'package.json'), 'utf8')).version;
  } catch {
    return undefined;
  }
}

/** Installs `major`'s packages into its cache folder unless they are there already. */
function ensureInstalled(major, update) {
  const dir = path.join(CACHE, String(major));
  const dependencies = dependenciesOf(major);
  const manifest = { name: `nest-${major}-for-tests`, private: true, dependencies };
  const manifestPath = path.join(dir, 'package.json');
  const current = fs.existsSync(manifestPath) ? fs.readFileSync(manifestPath, 'utf8') : undefined;
  const wanted = `${JSON.stringify(manifest, null, 2)}\n`;
  const complete = Object.keys(dependencies).every((name) => installedVersion(dir, name) !== undefined);
  if (!update && current === wanted && complete) return dir;
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(manifestPath, wanted);
  if (update) fs.rmSync(path.join(dir, 'package-lock.json'), { force: true });
  console.log(`Installing NestJS ${major} into ${path.relative(ROOT, dir)} …`);
  const npm = spawnSync('npm', ['install', '--prefix', dir, '--no-audit', '--no-fund', '--ignore-scripts', '--loglevel=error'], {
    stdio: 'inherit',
    cwd: dir,
  });
  if (npm.status !== 0) throw new Error(`npm install of NestJS ${major} failed (exit ${npm.status ?? npm.signal})`);
  return dir;
}

/** Runs the test files against the install in `dir`; the outcome and how long it took. */
function runTests(major, dir) {
  const started = Date.now();
  const nodeOptions = [process.env.NODE_OPTIONS, `--require ${PRELOAD}`].filter(Boolean).join(' ');
  const run = spawnSync(
    process.execPath,
    ['--test', '--test-concurrency=1', '--test-reporter=spec', ...TEST_FILES],
    {
      cwd: ROOT,
      stdio: 'inherit',
      env: { ...process.env, NEST_PREFIX: dir, NEST_MAJOR: String(major), NODE_OPTIONS: nodeOptions },
    },
  );
  return { passed: run.status === 0, seconds: (Date.now() - started) / 1000 };
}

/** Node.js can `require()` an ES module (NestJS 12 is ES modules only) from 20.19 / 22.12 on. */
function requiresEsm() {
  return process.features.require_module === true;
}

function main() {
  const options = parseArgs(process.argv.slice(2));
  const majors = options.only.length > 0 ? options.only : MAJORS;
  const results = [];
  for (const major of majors) {
    if (major >= 12 && !requiresEsm()) {
      throw new Error(`NestJS ${major} is ES modules only: this Node.js ${process.version} cannot require() it (20.19 or later is needed)`);
    }
    const dir = ensureInstalled(major, options.update);
    const used = ['@nestjs/common', '@nestjs/core', '@nestjs/terminus'].map((name) => `${name} ${installedVersion(dir, name)}`);
    console.log(`\n=== NestJS ${major}: ${used.join(', ')} (node ${process.version})\n`);
    results.push({ major, used, ...runTests(major, dir) });
  }
  console.log('\nNestJS versions:');
  for (const { major, used, passed, seconds } of results) {
    console.log(`  ${passed ? 'pass' : 'FAIL'}  NestJS ${major}: ${used.join(', ')}  (${seconds.toFixed(1)} s)`);
  }
  if (results.some(({ passed }) => !passed)) process.exitCode = 1;
}

try {
  main();
} catch (error) {
  console.error(error.message);
  process.exitCode = 1;
}
