'use strict';

// The package's public face as npm packs it: an exports map (the root with its types, the CLI,
// package.json; nothing under lib/ reachable by a deep import), a LICENSE matching the
// manifest's license, a Keep-a-Changelog CHANGELOG with this version, and the links and
// keywords a registry page shows. The tarball is packed for real and unpacked into a bare
// project's node_modules, where the paths are resolved as an application would.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');

jest.setTimeout(60000);

const ROOT = path.resolve(__dirname, '..', '..');
const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
const REPOSITORY = 'https://github.com/schally/nestjs-messenger-native';

let dir;
let packedFiles;
let packedManifest;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-manifest-'));
  const [packed] = JSON.parse(
    execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', dir], { cwd: ROOT, encoding: 'utf8' }),
  );
  packedFiles = packed.files.map((f) => f.path);
  const installed = path.join(dir, 'app', 'node_modules', pkg.name);
  fs.mkdirSync(installed, { recursive: true });
  execFileSync('tar', ['-xzf', path.join(dir, packed.filename), '-C', installed, '--strip-components', '1']);
  packedManifest = JSON.parse(fs.readFileSync(path.join(installed, 'package.json'), 'utf8'));
});

afterAll(() => {
  if (dir !== undefined) fs.rmSync(dir, { recursive: true, force: true });
});

/** How `specifier` resolves from the bare project: the path inside the package, or the error code. */
function resolveFromApp(specifier, kind) {
  const app = path.join(dir, 'app');
  const script =
    kind === 'import'
      ? `try { console.log(import.meta.resolve(${JSON.stringify(specifier)})) } catch (e) { console.log(e.code) }`
      : `try { console.log(require.resolve(${JSON.stringify(specifier)})) } catch (e) { console.log(e.code) }`;
  const args = kind === 'import' ? ['--input-type=module', '-e', script] : ['-e', script];
  const out = execFileSync(process.execPath, args, { cwd: app, encoding: 'utf8' }).trim();
  const prefix = kind === 'import' ? `file://${path.join(app, 'node_modules', pkg.name)}/` : `${path.join(app, 'node_modules', pkg.name)}/`;
  return out.startsWith(prefix) ? out.slice(prefix.length) : out;
}

describe('the exports map', () => {
  test('is in the packed manifest: the root with its types, the CLI and package.json', () => {
    expect(packedManifest.exports).toEqual({
      '.': { types: './index.d.ts', default: './index.js' },
      './cli': './bin/nestjs-messenger-native.js',
      './package.json': './package.json',
    });
    // The types condition must come first: resolvers take the first condition that matches.
    expect(Object.keys(packedManifest.exports['.'])[0]).toBe('types');
    expect(packedManifest.main).toBe('index.js');
    expect(packedManifest.types).toBe('index.d.ts');
    expect(packedManifest.bin).toEqual({ [pkg.name]: 'bin/nestjs-messenger-native.js' });
  });

  test.each(['require', 'import'])('from %s: the public paths resolve, deep imports do not', (kind) => {
    expect(resolveFromApp(pkg.name, kind)).toBe('index.js');
    expect(resolveFromApp(`${pkg.name}/cli`, kind)).toBe('bin/nestjs-messenger-native.js');
    expect(resolveFromApp(`${pkg.name}/package.json`, kind)).toBe('package.json');
    for (const deep of ['lib/native/addon.js', 'lib/transports/sql-transport', 'lib/cli/commands.js', 'binding.js', 'index.js']) {
      expect(resolveFromApp(`${pkg.name}/${deep}`, kind)).toBe('ERR_PACKAGE_PATH_NOT_EXPORTED');
    }
  });

  test('every file it names is packed', () => {
    const targets = [packedManifest.exports['.'].types, packedManifest.exports['.'].default, packedManifest.exports['./cli']];
    for (const target of targets) expect(packedFiles).toContain(target.replace(/^\.\//, ''));
  });
});

describe('LICENSE and CHANGELOG', () => {
  test('both are packed', () => {
    expect(packedFiles).toEqual(expect.arrayContaining(['LICENSE', 'CHANGELOG.md']));
  });

  test('the LICENSE is the license the manifest names', () => {
    expect(pkg.license).toBe('MIT');
    const license = fs.readFileSync(path.join(ROOT, 'LICENSE'), 'utf8');
    expect(license.split('\n')[0]).toBe('MIT License');
    expect(license).toContain('Permission is hereby granted, free of charge');
  });

  test('the CHANGELOG keeps Keep a Changelog: Unreleased, then this version, each linked', () => {
    const changelog = fs.readFileSync(path.join(ROOT, 'CHANGELOG.md'), 'utf8');
    const versions = [...changelog.matchAll(/^## \[([^\]]+)\]/gm)].map((m) => m[1]);
    expect(versions[0]).toBe('Unreleased');
    expect(versions).toContain(pkg.version);
    expect(changelog).toContain('https://keepachangelog.com/');
    for (const version of versions) expect(changelog).toMatch(new RegExp(`^\\[${version.replace(/\./g, '\\.')}\\]: ${REPOSITORY}/`, 'm'));
  });
});

test('repository, homepage, bugs and keywords point at the project', () => {
  expect(packedManifest.repository).toEqual({ type: 'git', url: `git+${REPOSITORY}.git` });
  expect(packedManifest.homepage).toBe(`${REPOSITORY}#readme`);
  expect(packedManifest.bugs).toEqual({ url: `${REPOSITORY}/issues` });
  expect(packedManifest.keywords).toEqual(expect.arrayContaining(['nestjs', 'postgresql', 'mysql', 'sqlite', 'redis']));
});
