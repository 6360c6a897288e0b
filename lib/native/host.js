'use strict';

/**
 * Whether this process's JavaScript host is Node.js itself, not another runtime that also
 * loads Node-API addons (Bun, Deno). The addon's direct send path drives the host's libuv
 * loop; those runtimes export libuv's names as stubs that abort (Bun) or crash (Deno), so it
 * is used only where this says yes. Every such runtime also says it is Node.js
 * (`process.release.name`), so the positive check is paired with the marks each one leaves.
 * @param {typeof globalThis} [global]
 * @returns {boolean}
 */
function isNodeHost(global = globalThis) {
  const proc = global.process;
  if (typeof proc !== 'object' || proc === null) return false;
  const versions = proc.versions ?? {};
  return (
    proc.release?.name === 'node' &&
    typeof versions.node === 'string' &&
    typeof versions.uv === 'string' &&
    versions.bun === undefined &&
    versions.deno === undefined &&
    global.Bun === undefined &&
    global.Deno === undefined
  );
}

module.exports = { isNodeHost };
