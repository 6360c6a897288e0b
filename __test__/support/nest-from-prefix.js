'use strict';

// Preloaded with `node --require` (through NODE_OPTIONS, so forked apps get it too) by
// scripts/test-nest-versions.js: NestJS's packages (`@nestjs/*`, and the `reflect-metadata` and
// `rxjs` an app shares with them) resolve from the install in NEST_PREFIX for every file outside
// that install: the tests, lib/ (the default logger's lazy lookup) and the stand-in core. Files
// inside it resolve as npm laid them out, so NestJS's own imports of each other stay within one
// major. NODE_PATH could not do this: Node.js reads it only after the node_modules lookup, which
// finds the repository's own @nestjs/common first. The require of an ES-module-only NestJS (12)
// is Node.js's own `require(esm)` (20.19 and later), which shares its module instances with
// `import`, so lib/, the tests and NestJS itself see one `Logger` class.

const Module = require('node:module');
const path = require('node:path');

const prefix = process.env.NEST_PREFIX;
if (!prefix) throw new Error('support/nest-from-prefix.js needs NEST_PREFIX (the NestJS install to resolve from)');

const installed = path.join(path.resolve(prefix), 'node_modules') + path.sep;
const SHARED_WITH_NEST = /^(@nestjs\/|reflect-metadata$|rxjs($|\/))/;
const resolveFilename = Module._resolveFilename;

Module._resolveFilename = function resolveNestFromPrefix(request, parent, isMain, options) {
  const outside = !parent?.filename?.startsWith(installed);
  if (outside && SHARED_WITH_NEST.test(request) && options?.paths === undefined) {
    return resolveFilename.call(this, request, parent, isMain, { ...options, paths: [path.resolve(prefix)] });
  }
  return resolveFilename.call(this, request, parent, isMain, options);
};
