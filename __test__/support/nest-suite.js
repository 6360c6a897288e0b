'use strict';

// What the NestJS-facing test files share (the logger adapter, the default logger, the terminus
// indicator, shutdown hooks). Each runs under two runners: jest (`npm run test:js`) with the
// repository's own NestJS, and `node --test` (`npm run test:nest`, scripts/test-nest-versions.js)
// once per NestJS major, with NestJS resolved from that major's install by
// support/nest-from-prefix.js; NestJS 12 is ES modules only, which jest cannot load. This module
// gives them one set of hooks for either runner (jest's names), node:assert for assertions, and
// the NestJS packages of the run, checked to be the major the runner asked for (NEST_MAJOR).

const fs = require('node:fs');
const path = require('node:path');

const inJest = typeof globalThis.expect === 'function' && typeof globalThis.beforeAll === 'function';

/**
 * `describe`, `it(name, fn, timeoutMs?)`, `beforeAll`, `afterAll`, `afterEach` of the runner
 * this file runs under.
 */
const runner = inJest ? jestRunner() : nodeRunner();

function jestRunner() {
  const { describe, it, beforeAll, afterAll, afterEach } = globalThis;
  return { describe, it, beforeAll, afterAll, afterEach };
}

function nodeRunner() {
  const test = require('node:test');
  const withTimeout = (register) => (fn, timeoutMs) => register(fn, timeoutMs ? { timeout: timeoutMs } : {});
  return {
    describe: (name, fn) => test.describe(name, fn),
    it: (name, fn, timeoutMs) => test.it(name, timeoutMs ? { timeout: timeoutMs } : {}, fn),
    beforeAll: withTimeout(test.before),
    afterAll: withTimeout(test.after),
    afterEach: withTimeout(test.afterEach),
  };
}

/** The version in the package.json of the package whose entry point is `file`. */
function versionOf(file, name) {
  for (let dir = path.dirname(file); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const manifest = path.join(dir, 'package.json');
    if (fs.existsSync(manifest)) {
      const { name: found, version } = JSON.parse(fs.readFileSync(manifest, 'utf8'));
      if (found === name) return version;
    }
  }
  throw new Error(`no package.json of ${name} above ${file}`);
}

/** `name`'s version as this process resolves it, or undefined when it cannot be resolved. */
function resolvedVersion(name) {
  try {
    return versionOf(require.resolve(name), name.replace(/^terminus(\d+)$/, '@nestjs/terminus'));
  } catch (error) {
    if (error.code === 'MODULE_NOT_FOUND') return undefined;
    throw error;
  }
}

const major = (version) => Number(version.split('.')[0]);

require('reflect-metadata');
const common = require('@nestjs/common');
const core = require('@nestjs/core');
const versions = { common: resolvedVersion('@nestjs/common'), core: resolvedVersion('@nestjs/core') };
if (process.env.NEST_MAJOR !== undefined && major(versions.common) !== Number(process.env.NEST_MAJOR)) {
  throw new Error(`NEST_MAJOR is ${process.env.NEST_MAJOR} but @nestjs/common ${versions.common} was loaded: is support/nest-from-prefix.js preloaded?`);
}

/**
 * The `@nestjs/terminus` packages this run tests: `@nestjs/terminus` itself where it resolves
 * (a `node --test` run's install), else the repository's side-by-side aliases (`terminus10`,
 * `terminus11`) that fit its NestJS. `{ name, module, major }` each, loaded on demand.
 */
function terminusPackages() {
  const names = resolvedVersion('@nestjs/terminus') !== undefined ? ['@nestjs/terminus'] : ['terminus10', 'terminus11'];
  return names
    .map((name) => ({ name, version: resolvedVersion(name) }))
    .filter(({ version }) => version !== undefined)
    .map(({ name, version }) => ({ name: `@nestjs/terminus ${version}`, major: major(version), load: () => require(name) }));
}

const nest = { common, core, versions, major: major(versions.common) };

module.exports = { ...runner, inJest, nest, terminusPackages };
