'use strict';

// `npm publish --dry-run` of what the publish job publishes from this machine's build: the
// main package (optionalDependencies filled as napi prepublish fills them) and this machine's
// platform package (its addon where napi artifacts puts it), each from a staged copy, with the
// workflow's own flags. npm checks the manifests as it would for a real publish; this checks
// what each tarball holds and what `npm publish --provenance` needs of each manifest.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { napiConfig, hostPlatform, stageMain, stagePlatform, npmJson } = require('./stage');

/** The flags of the workflow's publish step (dry-run added). */
const PUBLISH = ['publish', '--dry-run', '--provenance', '--access', 'public', '--ignore-scripts'];

/** `npm publish --dry-run` in `dir`: the one package it reports. */
function dryRun(dir) {
  const report = npmJson(PUBLISH, dir);
  return Object.values(report)[0] ?? report;
}

/**
 * Runs both dry runs; throws on the first package whose manifest or contents are wrong.
 * @returns {Promise<string[]>} one line per package: what would be published
 */
async function publishDryRun() {
  const config = await napiConfig();
  const platform = hostPlatform(config.targets);
  if (platform === undefined) throw new Error(`this machine (${process.platform}-${process.arch}) is none of the napi targets`);
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-publish-'));
  try {
    const main = await stageMain(path.join(work, 'main'));
    const staged = await stagePlatform(path.join(work, platform), platform, { withAddon: true });
    const lines = [];
    for (const { dir, manifest, expect } of [
      {
        ...main,
        expect: (files) => {
          if (files.some((f) => f.endsWith('.node'))) throw new Error(`the main package would ship an addon: ${files.join(', ')}`);
          for (const f of ['package.json', 'index.js', 'index.d.ts', 'binding.js', 'binding.d.ts', 'LICENSE', 'CHANGELOG.md', 'README.md']) {
            if (!files.includes(f)) throw new Error(`the main package would not ship ${f}`);
          }
        },
      },
      {
        ...staged,
        expect: (files) => {
          const wanted = ['README.md', staged.addon, 'package.json'];
          if (JSON.stringify([...files].sort()) !== JSON.stringify(wanted.sort())) {
            throw new Error(`${staged.manifest.name} would ship ${files.join(', ')}, not ${wanted.join(', ')}`);
          }
        },
      },
    ]) {
      if (manifest.repository?.url !== main.manifest.repository.url) {
        throw new Error(`${manifest.name}: repository ${JSON.stringify(manifest.repository)}; npm publish --provenance needs ${main.manifest.repository.url}`);
      }
      const report = dryRun(dir);
      if (report.name !== manifest.name || report.version !== main.manifest.version) {
        throw new Error(`the dry run would publish ${report.id}, not ${manifest.name}@${main.manifest.version}`);
      }
      const files = report.files.map((f) => f.path);
      expect(files);
      lines.push(`${report.id}: ${files.length} files, ${(report.size / 1e6).toFixed(1)} MB packed`);
    }
    const optional = Object.keys(main.manifest.optionalDependencies);
    lines.push(`optionalDependencies: ${optional.length} platform packages at ${main.manifest.version}`);
    return lines;
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

module.exports = { publishDryRun };
