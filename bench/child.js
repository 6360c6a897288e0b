'use strict';

const { execFileSync } = require('node:child_process');
const path = require('node:path');

/**
 * Runs `bench/<script>` in a fresh Node process with `job` (JSON) as its argument and resolves
 * the last line it printed, parsed: every measurement starts cold (fresh JIT, pools, peak RSS).
 * Throws when the process fails or runs longer than 10 minutes.
 * @param {string} script a file in bench/
 * @param {object} job
 * @param {NodeJS.ProcessEnv} [env] the process's environment (this one's by default)
 */
function runFresh(script, job, env = process.env) {
  const output = execFileSync(process.execPath, [path.join(__dirname, script), JSON.stringify(job)], {
    env,
    encoding: 'utf8',
    timeout: 600000,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return JSON.parse(output.trim().split('\n').pop());
}

module.exports = { runFresh };
