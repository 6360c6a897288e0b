'use strict';

// The package as npm would serve it (napi-rs conventions): one prebuilt package per target
// under npm/, the platform build matrix of .github/workflows/CI.yml covering exactly
// package.json's napi.targets, the publish scripts napi-rs documents, and a tarball that holds
// only what runs. The workflow cannot run here: it is checked by parsing it.

const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const YAML = require('yaml');

const ROOT = path.resolve(__dirname, '..', '..');
const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8'));

/** napi-rs's platform name and npm os/cpu/libc of a Rust target triple. */
const PLATFORMS = {
  'x86_64-unknown-linux-gnu': { name: 'linux-x64-gnu', os: 'linux', cpu: 'x64', libc: 'glibc' },
  'x86_64-unknown-linux-musl': { name: 'linux-x64-musl', os: 'linux', cpu: 'x64', libc: 'musl' },
  'aarch64-unknown-linux-gnu': { name: 'linux-arm64-gnu', os: 'linux', cpu: 'arm64', libc: 'glibc' },
  'aarch64-unknown-linux-musl': { name: 'linux-arm64-musl', os: 'linux', cpu: 'arm64', libc: 'musl' },
  'x86_64-apple-darwin': { name: 'darwin-x64', os: 'darwin', cpu: 'x64' },
  'aarch64-apple-darwin': { name: 'darwin-arm64', os: 'darwin', cpu: 'arm64' },
  'x86_64-pc-windows-msvc': { name: 'win32-x64-msvc', os: 'win32', cpu: 'x64' },
};

it('targets the platforms the issue names: linux x64/arm64 gnu and musl, darwin x64/arm64, win32 x64', () => {
  expect([...pkg.napi.targets].sort()).toEqual(Object.keys(PLATFORMS).sort());
});

it.each(Object.entries(PLATFORMS))('%s has its npm/ package at the main version, for its os, cpu and libc, with the main package\'s repository', (_, platform) => {
  const dir = path.join(ROOT, 'npm', platform.name);
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  const binary = `${pkg.napi.binaryName}.${platform.name}.node`;
  expect(manifest).toMatchObject({
    name: `${pkg.name}-${platform.name}`,
    version: pkg.version,
    os: [platform.os],
    cpu: [platform.cpu],
    main: binary,
    files: [binary],
  });
  expect(manifest.libc).toEqual(platform.libc === undefined ? undefined : [platform.libc]);
  // `npm publish --provenance` refuses a package whose repository is not the one that built it.
  expect(manifest).toMatchObject({ repository: pkg.repository, license: pkg.license, engines: pkg.engines });
});

it('the workflow builds every target, tests on the runners that can run them, and publishes on a version tag', () => {
  const workflow = YAML.parse(fs.readFileSync(path.join(ROOT, '.github', 'workflows', 'CI.yml'), 'utf8'));
  const built = workflow.jobs.build.strategy.matrix.include.map((s) => s.target);
  expect([...built].sort()).toEqual([...pkg.napi.targets].sort());
  // Every target is built by `npm run build` (the flags that write binding.js and binding.d.ts
  // as committed), for its own --target.
  const buildSteps = workflow.jobs.build.steps.map((s) => s.run ?? '').filter((run) => run.includes('build'));
  expect(buildSteps).toContain('npm run build -- --target ${{ matrix.target }} ${{ matrix.flags }}');
  expect(pkg.scripts.build).toBe('napi build --platform --release --js binding.js --dts binding.d.ts');
  expect(workflow.jobs.test.needs).toBe('build');
  expect(workflow.jobs.publish.needs).toEqual(['build', 'test']);
  expect(workflow.jobs.publish.if).toContain("startsWith(github.ref, 'refs/tags/v')");
  const publishSteps = workflow.jobs.publish.steps.map((s) => s.run ?? '').join('\n');
  expect(publishSteps).toContain('napi artifacts');
  expect(publishSteps).toContain('npm publish --provenance --access public');
  expect(workflow.jobs.publish.permissions).toEqual({ contents: 'read', 'id-token': 'write' });
});

it('wires the napi-rs publish scripts: artifacts into npm/, prepublish adds the optionalDependencies', () => {
  expect(pkg.scripts.artifacts).toBe('napi artifacts');
  expect(pkg.scripts.prepublishOnly).toMatch(/^napi prepublish -t npm\b/);
});

it('packs only what runs: no tests, no stand-in core, no bench, demo or Rust sources', () => {
  const [packed] = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: ROOT, encoding: 'utf8' }));
  const files = packed.files.map((f) => f.path).sort();
  const allowed = /^(index\.js|index\.d\.ts|binding\.js|binding\.d\.ts|package\.json|README\.md|LICENSE|CHANGELOG\.md|lib\/([\w-]+\/)?[\w-]+\.js|bin\/nestjs-messenger-native\.js)$/;
  expect(files.filter((f) => !allowed.test(f))).toEqual([]);
  expect(files).toEqual(expect.arrayContaining(['index.js', 'index.d.ts', 'binding.js', 'lib/transports/native-transport.js', 'lib/transports/outbox.js', 'bin/nestjs-messenger-native.js']));
});
