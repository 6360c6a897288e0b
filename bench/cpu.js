'use strict';

const fs = require('node:fs');

/** CPU time of the Node main thread in µs (Linux schedstat: ns on CPU), or NaN elsewhere. */
function mainThreadCpuMicros() {
  try {
    const stat = fs.readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8');
    return Number(stat.split(' ')[0]) / 1000;
  } catch {
    return Number.NaN;
  }
}

/** Starts a measurement; `stop()` gives elapsed ms, main-thread and whole-process CPU µs. */
function measure() {
  const started = process.hrtime.bigint();
  const main = mainThreadCpuMicros();
  const usage = process.cpuUsage();
  return {
    stop() {
      const elapsedMs = Number(process.hrtime.bigint() - started) / 1e6;
      const process_ = process.cpuUsage(usage);
      return {
        elapsedMs,
        mainCpuMicros: mainThreadCpuMicros() - main,
        processCpuMicros: process_.user + process_.system,
      };
    },
  };
}

module.exports = { measure, mainThreadCpuMicros };
