'use strict';

// The install a user gets once the release is published, done the way npm will do it. Every
// package the release publishes is packed (the main package with its optionalDependencies
// filled as napi prepublish fills them, every npm/ platform package, this machine's with the
// addon it built) and served, with the core's stand-in, by a local registry (local-registry.js).
// A fresh project then runs a plain `npm install nestjs-messenger-native
// @schally/nestjs-messenger` against that registry, with a cache of its own: npm reads the main
// package's optionalDependencies, fetches each platform package's document, keeps the one whose
// os, cpu and libc match this machine and skips the others without fetching them. The other
// platforms' tarballs hold their manifests only (their addons are built on other runners):
// the check fails if npm fetches any of them. Then a script in that project moves one message
// through SqlTransport on SQLite (send, get, ack) with the binding's version check enforced, and
// says where its addon was loaded from.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { promisify } = require('node:util');
const { execFile } = require('node:child_process');
const { ROOT, napiConfig, hostPlatform, stageMain, stagePlatform, pack } = require('./stage');
const { startRegistry } = require('./local-registry');

const run = promisify(execFile);

const ROUND_TRIP = `
'use strict';
const path = require('node:path');
const { SqlTransport } = require('nestjs-messenger-native');
const { Envelope, JsonSerializer, TransportMessageIdStamp } = require('@schally/nestjs-messenger');

class Ping {
  constructor(n) { this.n = n; }
}

async function main() {
  const transport = new SqlTransport({ dsn: 'sqlite://' + path.join(__dirname, 'queue.db'), serializer: new JsonSerializer([Ping]) });
  await transport.send(new Envelope(new Ping(7)));
  let received;
  for await (const envelope of transport.get(new AbortController().signal)) {
    await transport.ack(envelope);
    received = envelope;
    break;
  }
  const left = await transport.getMessageCount();
  await transport.close();
  const addon = Object.keys(require.cache).find((file) => file.endsWith('.node'));
  console.log(JSON.stringify({
    received: received.message instanceof Ping ? received.message.n : null,
    id: received.last(TransportMessageIdStamp) !== undefined,
    left,
    addon: path.relative(__dirname, addon),
  }));
}
main().catch((error) => { console.error(error); process.exitCode = 1; });
`;

/** Reads the manifest inside a packed tarball's staging dir. */
function manifestIn(dir) {
  return JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
}

/**
 * Packs, serves, installs and runs; throws on the first thing that is not as npm will do it.
 * @returns {Promise<string[]>} what happened, a line each
 */
async function installCheck() {
  const config = await napiConfig();
  const platform = hostPlatform(config.targets);
  if (platform === undefined) throw new Error(`this machine (${process.platform}-${process.arch}) is none of the napi targets`);
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-install-'));
  const tarballs = path.join(work, 'tarballs');
  fs.mkdirSync(tarballs);
  let registry;
  try {
    const main = await stageMain(path.join(work, 'main'));
    const packages = [{ manifest: main.manifest, ...pack(main.dir, tarballs) }];
    for (const target of config.targets) {
      const staged = await stagePlatform(path.join(work, target.platformArchABI), target.platformArchABI, {
        withAddon: target.platformArchABI === platform,
      });
      packages.push({ manifest: staged.manifest, ...pack(staged.dir, tarballs) });
    }
    const core = path.join(ROOT, '__test__', 'support', 'nestjs-messenger');
    packages.push({ manifest: manifestIn(core), ...pack(core, tarballs) });
    registry = await startRegistry(packages);

    const app = path.join(work, 'app');
    fs.mkdirSync(app);
    fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }, null, 2));
    fs.writeFileSync(path.join(app, 'round-trip.js'), ROUND_TRIP);
    const started = Date.now();
    await run(
      'npm',
      [
        'install',
        `${main.manifest.name}@${main.manifest.version}`,
        '@schally/nestjs-messenger@^1',
        '--registry',
        `${registry.url}/`,
        '--cache',
        path.join(work, 'npm-cache'),
        '--userconfig',
        path.join(work, 'npmrc'),
        '--no-audit',
        '--no-fund',
        '--no-update-notifier',
        '--loglevel',
        'error',
      ],
      { cwd: app, timeout: 180_000 },
    );
    const lines = [`npm install from the local registry: ${((Date.now() - started) / 1000).toFixed(1)} s`];

    const fetched = registry.requests.filter((r) => r.startsWith('GET /-/')).map((r) => r.slice('GET /-/'.length)).sort();
    const hostPackage = `${config.packageName}-${platform}`;
    const expected = packages
      .filter((p) => !p.manifest.name.startsWith(`${config.packageName}-`) || p.manifest.name === hostPackage)
      .map((p) => p.filename)
      .sort();
    if (JSON.stringify(fetched) !== JSON.stringify(expected)) {
      throw new Error(`npm fetched the tarballs ${fetched.join(', ')}; expected ${expected.join(', ')}`);
    }
    const unknown = registry.requests.filter((r) => r.startsWith('404 ')).map((r) => r.slice('404 /'.length));
    const documents = registry.requests.filter((r) => r.startsWith('GET /') && !r.startsWith('GET /-/')).length;
    lines.push(`registry: ${documents} package documents asked for (not served: ${unknown.join(', ') || 'none'})`);
    lines.push(`tarballs fetched: ${fetched.join(', ')}`);

    const installed = fs.readdirSync(path.join(app, 'node_modules')).filter((d) => d.startsWith(config.packageName));
    const wanted = [config.packageName, hostPackage];
    if (JSON.stringify(installed.sort()) !== JSON.stringify(wanted.sort())) {
      throw new Error(`installed ${installed.join(', ')}; expected ${wanted.join(', ')}`);
    }
    const lock = JSON.parse(fs.readFileSync(path.join(app, 'package-lock.json'), 'utf8'));
    const locked = Object.keys(lock.packages).filter((p) => p.startsWith(`node_modules/${config.packageName}-`));
    if (locked.length !== config.targets.length) {
      throw new Error(`the lockfile records ${locked.length} platform packages, not ${config.targets.length}: ${locked.join(', ')}`);
    }
    lines.push(`installed: ${installed.join(', ')}; the lockfile records all ${locked.length} platform packages (optional)`);

    const { stdout } = await run(process.execPath, ['round-trip.js'], {
      cwd: app,
      timeout: 60_000,
      env: { ...process.env, NAPI_RS_ENFORCE_VERSION_CHECK: '1' },
    });
    const result = JSON.parse(stdout.trim().split('\n').pop());
    const addon = path.join('node_modules', hostPackage, `${config.binaryName}.${platform}.node`);
    if (result.received !== 7 || !result.id || result.left !== 0 || result.addon !== addon) {
      throw new Error(`the round trip gave ${JSON.stringify(result)}; expected message 7 with its id, none left, the addon from ${addon}`);
    }
    lines.push(`round trip on SQLite: sent, got and acked message 7, none left; addon loaded from ${result.addon}`);
    return lines;
  } finally {
    await registry?.close();
    fs.rmSync(work, { recursive: true, force: true });
  }
}

module.exports = { installCheck };
