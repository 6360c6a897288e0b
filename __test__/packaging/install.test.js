'use strict';

// The package as a user installs it: the main package and the linux-x64-gnu platform package
// (holding the addon this test run built) are packed with `npm pack`, the stand-in core too,
// and installed into a fresh project beside the real @nestjs/common, @nestjs/core,
// reflect-metadata and rxjs from the registry. In that project: a NestJS application sends and
// handles a message through SqlTransport on SQLite; an ES module does the same through
// `import { SqlTransport } from 'nestjs-messenger-native'`; a TypeScript file using both
// transports compiles under `strict`; and the tree holds one copy of the core (stamps are
// matched by class identity).

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync, spawnSync } = require('node:child_process');

const ROOT = path.resolve(__dirname, '..', '..');
const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
const PLATFORM = 'linux-x64-gnu';
const ADDON = `${pkg.napi.binaryName}.${PLATFORM}.node`;
const TSC = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');

let dir;
let app;

/** `npm …` in `cwd`, its stdout. */
function npm(args, cwd) {
  return execFileSync('npm', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 240_000 });
}

/** Packs the package in `from` into `dir`; the tarball's path. */
function pack(from) {
  const [{ filename }] = JSON.parse(npm(['pack', '--json', '--ignore-scripts', '--pack-destination', dir], from));
  return path.join(dir, filename);
}

/** Runs `file` with node in the app; its stdout. */
function run(file) {
  return execFileSync(process.execPath, [file], { cwd: app, encoding: 'utf8', timeout: 60_000 });
}

const APP_MAIN = `
'use strict';
require('reflect-metadata');
const path = require('node:path');
const { Module, Injectable } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { Envelope, JsonSerializer, Worker } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('nestjs-messenger-native');

class Greeting {
  constructor(name) { this.name = name; }
}

/** The transport as a provider the application closes on shutdown. */
class Messaging {
  constructor() {
    this.transport = new SqlTransport({
      dsn: 'sqlite://' + path.join(__dirname, 'app.db'),
      serializer: new JsonSerializer([Greeting]),
    });
  }
  async onApplicationShutdown() { await this.transport.close(); }
}
Injectable()(Messaging);

class AppModule {}
Module({ providers: [Messaging] })(AppModule);

async function main() {
  const context = await NestFactory.createApplicationContext(AppModule, { logger: false });
  context.enableShutdownHooks();
  const { transport } = context.get(Messaging);
  await transport.send(new Envelope(new Greeting('nest')));
  const handled = [];
  const bus = { dispatch: async (envelope) => handled.push(envelope.message) };
  await new Worker(transport, bus, { maxMessages: 1 }).run();
  await context.close();
  console.log(handled.map((m) => (m instanceof Greeting ? 'handled ' + m.name : 'wrong type')).join(','));
}
main().catch((error) => { console.error(error); process.exitCode = 1; });
`;

const APP_ESM = `
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import core from '@schally/nestjs-messenger';
import { SqlTransport, RedisStreamsTransport } from 'nestjs-messenger-native';

// (The stand-in core is CommonJS without named-export hints: taken whole.)
const { Envelope, JsonSerializer, TransportMessageIdStamp } = core;

class Greeting {
  constructor(name) { this.name = name; }
}
const here = path.dirname(fileURLToPath(import.meta.url));
const transport = new SqlTransport({ dsn: 'sqlite://' + path.join(here, 'esm.db'), serializer: new JsonSerializer([Greeting]) });
await transport.send(new Envelope(new Greeting('esm')));
for await (const envelope of transport.get(new AbortController().signal)) {
  await transport.ack(envelope);
  const stamped = envelope.last(TransportMessageIdStamp) !== undefined;
  console.log('handled ' + envelope.message.name + (stamped ? ' with its id' : '') + (typeof RedisStreamsTransport === 'function' ? ', redis exported' : ''));
  break;
}
await transport.close();
`;

const APP_TS = `
import { Envelope, JsonSerializer } from '@schally/nestjs-messenger';
import { RedisStreamsTransport, SqlTransport, type TransportStats } from 'nestjs-messenger-native';

class Greeting {
  constructor(readonly name: string) {}
}

export async function both(signal: AbortSignal): Promise<number> {
  const serializer = new JsonSerializer([Greeting]);
  const sql = new SqlTransport({ dsn: 'sqlite://app.db', serializer, ackMode: 'commit' });
  const redis = new RedisStreamsTransport({ dsn: 'redis://127.0.0.1:6379', stream: 'app', serializer });
  await sql.send(new Envelope(new Greeting('typed')));
  for await (const envelope of redis.get(signal)) {
    await redis.ack(envelope);
  }
  const stats: TransportStats = sql.stats();
  const count: number = await sql.getMessageCount();
  await Promise.all([sql.close(), redis.close()]);
  return count + stats.staleSettles;
}
`;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-install-'));
  const builtAddon = path.join(ROOT, ADDON);
  if (!fs.existsSync(builtAddon)) throw new Error(`no built addon at ${builtAddon}: run npm run build:fast first`);

  const platformDir = path.join(dir, 'platform');
  fs.cpSync(path.join(ROOT, 'npm', PLATFORM), platformDir, { recursive: true });
  fs.copyFileSync(builtAddon, path.join(platformDir, ADDON));
  const tarballs = {
    [pkg.name]: pack(ROOT),
    [`${pkg.name}-${PLATFORM}`]: pack(platformDir),
    '@schally/nestjs-messenger': pack(path.join(ROOT, '__test__', 'support', 'nestjs-messenger')),
  };

  app = path.join(dir, 'app');
  fs.mkdirSync(app);
  const dependencies = Object.fromEntries(Object.entries(tarballs).map(([name, file]) => [name, `file:${file}`]));
  // What a NestJS project has anyway (its TypeScript sees Node's types, as Nest's own do).
  Object.assign(dependencies, {
    '@nestjs/common': '^10.4.0',
    '@nestjs/core': '^10.4.0',
    'reflect-metadata': '^0.2.0',
    rxjs: '^7.8.0',
    '@types/node': '^20.0.0',
  });
  fs.writeFileSync(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, dependencies }, null, 2));
  npm(['install', '--no-audit', '--no-fund', '--ignore-scripts'], app);
  fs.writeFileSync(path.join(app, 'main.js'), APP_MAIN);
  fs.writeFileSync(path.join(app, 'esm.mjs'), APP_ESM);
  fs.writeFileSync(path.join(app, 'usage.ts'), APP_TS);
  fs.writeFileSync(
    path.join(app, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: { strict: true, noEmit: true, target: 'es2022', module: 'commonjs', lib: ['es2022', 'dom'], types: ['node'] },
      files: ['usage.ts'],
    }),
  );
}, 300_000);

afterAll(() => {
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

it('installs the main package with its platform package, the addon coming from the platform package', () => {
  const installed = path.join(app, 'node_modules', pkg.name);
  expect(fs.existsSync(path.join(installed, ADDON))).toBe(false);
  expect(fs.existsSync(path.join(app, 'node_modules', `${pkg.name}-${PLATFORM}`, ADDON))).toBe(true);
  expect(fs.existsSync(path.join(installed, '__test__'))).toBe(false);
});

it('holds one copy of the core in the installed tree', () => {
  const copies = [];
  const walk = (at) => {
    for (const entry of fs.readdirSync(at, { withFileTypes: true })) {
      if (!entry.isDirectory()) continue;
      const sub = path.join(at, entry.name);
      if (sub.endsWith(path.join('@schally', 'nestjs-messenger'))) copies.push(sub);
      walk(sub);
    }
  };
  walk(path.join(app, 'node_modules'));
  expect(copies).toEqual([path.join(app, 'node_modules', '@schally', 'nestjs-messenger')]);
});

it('a NestJS application sends and handles a message through SqlTransport on SQLite', () => {
  expect(run('main.js').trim()).toBe('handled nest');
});

it("an ES module imports { SqlTransport } from 'nestjs-messenger-native' and round-trips a message", () => {
  expect(run('esm.mjs').trim()).toBe('handled esm with its id, redis exported');
});

it('a TypeScript file using both transports compiles under strict', () => {
  const compiled = spawnSync(process.execPath, [TSC, '-p', 'tsconfig.json'], { cwd: app, encoding: 'utf8' });
  expect(`${compiled.stdout}${compiled.stderr}`).toBe('');
  expect(compiled.status).toBe(0);
});
