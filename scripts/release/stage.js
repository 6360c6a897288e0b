'use strict';

// The packages as the publish job hands them to npm, laid out in a temporary directory so that
// the repository stays as it is: the main package with the optionalDependencies that
// `napi prepublish` fills (one per napi target, at the package's version), and each npm/
// platform package with its addon copied in where `napi artifacts` puts it
// (npm/<platform>/<binaryName>.<platform>.node). Only this machine's addon is built here; the
// other platform packages are staged with their manifests alone.

const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { readNapiConfig } = require('@napi-rs/cli');

const ROOT = path.resolve(__dirname, '..', '..');

/** `npm <args>` in `cwd`, parsed as JSON (npm's --json output). */
function npmJson(args, cwd) {
  return JSON.parse(execFileSync('npm', [...args, '--json'], { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 120_000 }));
}

/** package.json's napi config: the package and binary names and the targets, each with its platform name. */
function napiConfig() {
  return readNapiConfig(path.join(ROOT, 'package.json'));
}

/** The platform (napi's platformArchABI, as in npm/) of the machine this runs on, when it is a target. */
function hostPlatform(targets) {
  const abi = process.platform === 'linux' ? (process.report.getReport().header.glibcVersionRuntime ? 'gnu' : 'musl') : undefined;
  return targets.find((t) => t.platform === process.platform && t.arch === process.arch && (abi === undefined || t.abi === abi))?.platformArchABI;
}

/**
 * The optionalDependencies `napi prepublish` writes into the main package: every target's
 * platform package, at `version`.
 */
function optionalDependenciesOf(config, version) {
  return Object.fromEntries(config.targets.map((t) => [`${config.packageName}-${t.platformArchABI}`, version]));
}

/**
 * The main package as it is published, in `dir`: the files `npm pack` takes from the
 * repository, and its manifest with the optionalDependencies filled.
 * @returns {Promise<{ dir: string, manifest: object }>}
 */
async function stageMain(dir) {
  const config = await napiConfig();
  const [{ files }] = npmJson(['pack', '--dry-run', '--ignore-scripts'], ROOT);
  for (const { path: file } of files) {
    fs.mkdirSync(path.join(dir, path.dirname(file)), { recursive: true });
    fs.copyFileSync(path.join(ROOT, file), path.join(dir, file));
  }
  const manifest = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  manifest.optionalDependencies = optionalDependenciesOf(config, manifest.version);
  fs.writeFileSync(path.join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  return { dir, manifest };
}

/**
 * The npm/ package of `platform` in `dir`, with this machine's built addon copied in when
 * `withAddon` (it must exist: `npm test` builds it).
 * @returns {Promise<{ dir: string, manifest: object, addon: string }>}
 */
async function stagePlatform(dir, platform, { withAddon }) {
  const config = await napiConfig();
  const addon = `${config.binaryName}.${platform}.node`;
  fs.cpSync(path.join(ROOT, 'npm', platform), dir, { recursive: true });
  if (withAddon) {
    const built = path.join(ROOT, addon);
    if (!fs.existsSync(built)) throw new Error(`no built addon at ${built}: run npm run build:fast (npm test builds it)`);
    fs.copyFileSync(built, path.join(dir, addon));
  }
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  return { dir, manifest, addon };
}

/**
 * Packs the package in `from` into `into`.
 * @returns {{ file: string, filename: string, integrity: string, shasum: string, files: string[] }}
 */
function pack(from, into) {
  const [packed] = npmJson(['pack', '--ignore-scripts', '--pack-destination', into], from);
  return { file: path.join(into, packed.filename), filename: packed.filename, integrity: packed.integrity, shasum: packed.shasum, files: packed.files.map((f) => f.path) };
}

module.exports = { ROOT, napiConfig, hostPlatform, optionalDependenciesOf, stageMain, stagePlatform, pack, npmJson };
