'use strict';

// Checks that a release from this tree would publish, and install as npm will install it:
//
//   versions          every statement of the version agrees (release/versions.js)
//   publish-dry-run   npm publish --dry-run of the main package and this machine's platform
//                     package, staged as the publish job stages them (release/publish-dry-run.js)
//   install           every package packed and served by a local registry, installed into a
//                     fresh project by a plain npm install, one message through SqlTransport
//                     (release/install-check.js)
//
//   node scripts/release-check.js [check ...]     every check when none is named
//
// The last two need the addon `npm test` builds. Each prints its time; any failure exits 1.

const path = require('node:path');
const { checkVersions } = require('./release/versions');

const ROOT = path.resolve(__dirname, '..');

const CHECKS = {
  async versions() {
    const { version, statements, wrong } = checkVersions(ROOT);
    if (wrong.length > 0) {
      const list = wrong.map((s) => `  ${s.where}: ${s.version ?? 'none'}`).join('\n');
      throw new Error(`package.json says ${version}, but:\n${list}`);
    }
    return [`${version} in all ${statements.length} places: ${statements.map((s) => s.where).join(', ')}`];
  },
  'publish-dry-run': () => require('./release/publish-dry-run').publishDryRun(),
  install: () => require('./release/install-check').installCheck(),
};

async function main(names) {
  const unknown = names.filter((name) => !(name in CHECKS));
  if (unknown.length > 0) throw new Error(`no such check: ${unknown.join(', ')} (checks: ${Object.keys(CHECKS).join(', ')})`);
  let failed = 0;
  for (const name of names.length > 0 ? names : Object.keys(CHECKS)) {
    const started = Date.now();
    try {
      const lines = await CHECKS[name]();
      process.stdout.write(`release-check ${name}: ok (${((Date.now() - started) / 1000).toFixed(1)} s)\n`);
      for (const line of lines) process.stdout.write(`  ${line}\n`);
    } catch (error) {
      failed += 1;
      // A command's own output (npm's errors) says more than the stack of the call that ran it.
      const detail = error.stderr ? `${error.message}\n${error.stderr}` : error.stack;
      process.stdout.write(`release-check ${name}: FAILED (${((Date.now() - started) / 1000).toFixed(1)} s)\n  ${detail}\n`);
    }
  }
  return failed === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error) => {
    process.stderr.write(`${error.stack ?? error}\n`);
    process.exitCode = 1;
  },
);
