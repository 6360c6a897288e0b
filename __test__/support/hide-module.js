'use strict';

// Preloaded with `node --require` (NODE_OPTIONS): the package named by HIDE_MODULE cannot be
// resolved in this process, as in an app that never installed it. Every lookup of it is
// counted in `globalThis.hiddenModuleLookups`.

const Module = require('node:module');

const hidden = process.env.HIDE_MODULE;
const resolveFilename = Module._resolveFilename;
globalThis.hiddenModuleLookups = 0;

Module._resolveFilename = function resolveUnlessHidden(request, ...rest) {
  if (request === hidden || request.startsWith(`${hidden}/`)) {
    globalThis.hiddenModuleLookups += 1;
    const error = new Error(`Cannot find module '${request}'`);
    error.code = 'MODULE_NOT_FOUND';
    throw error;
  }
  return resolveFilename.call(this, request, ...rest);
};
