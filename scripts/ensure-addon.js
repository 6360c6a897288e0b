'use strict';

// Builds the native addon once when this platform has none yet (a fresh clone): `npm run demo`
// then works where nothing was built before. The build uses the `fast` profile (about two
// minutes from clean on 2 cores); an addon that loads is left alone.

const { spawnSync } = require('node:child_process');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const loads = spawnSync(process.execPath, ['-e', "require('./binding.js')"], { cwd: root, stdio: 'ignore' });
if (loads.status !== 0) {
  process.stdout.write('No native addon for this platform yet: building it once (npm run build:fast).\n');
  const build = spawnSync('npm', ['run', 'build:fast'], { cwd: root, stdio: 'inherit', shell: process.platform === 'win32' });
  process.exit(build.status ?? 1);
}
