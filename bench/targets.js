'use strict';

/**
 * What one round runs per engine and implementation: a workload, its size and, for the
 * large-message runs, the payload size. Keys name the results and the targets below.
 */
const RUNS = {
  consume: { workload: 'consume', n: 3000 },
  consume10k: { workload: 'consume', n: 1000, payloadBytes: 10_000 },
  consume100k: { workload: 'consume', n: 300, payloadBytes: 100_000 },
  // Long runs after a warm-up, as an app's sends run: a short one measures the JIT warming up
  // (bench/app-sends.js shows how much).
  sendSequential: { workload: 'sendSequential', n: 20_000, warmUp: 2000 },
  sendConcurrent: { workload: 'sendConcurrent', n: 20_000, warmUp: 2000 },
  sendConcurrent10k: { workload: 'sendConcurrent', n: 1000, payloadBytes: 10_000 },
  sendConcurrent100k: { workload: 'sendConcurrent', n: 300, payloadBytes: 100_000 },
  wake: { workload: 'wake', n: 300 },
  wakeRemote: { workload: 'wakeFromAnotherProcess', n: 300 },
  competing: { workload: 'competing', n: 3000 },
};

/** What a wake-up may take beyond the engine's own store of the message (the floor's p50), ms. */
const WAKE_ALLOWANCE_MS = 0.3;

/**
 * The performance targets, native ÷ upstream (higher is better unless
 * `lowerIsBetter`), an absolute bound on the native figure, or (`aboveFloor`) a bound of the
 * wake-up floor's send p50 measured in the same run plus `WAKE_ALLOWANCE_MS`, for the engines
 * listed. `metric` names the field of a run's result; `run` the key in RUNS when it is not the
 * target's own.
 */
const TARGETS = {
  consume: {
    label: 'B1 consume msgs/s',
    metric: 'rate',
    target: { postgres: 20, mysql: 20, redis: 5 },
  },
  consumeCpu: {
    label: 'B1 main-thread CPU µs/msg',
    run: 'consume',
    metric: 'mainCpuPerMessage',
    lowerIsBetter: true,
    target: { postgres: 1 / 5, mysql: 1 / 10, redis: 1 / 3 },
  },
  consumeServerCpu: {
    label: 'B1 server CPU µs/msg',
    run: 'consume',
    metric: 'serverCpuPerMessage',
    lowerIsBetter: true,
    target: { postgres: 1 / 20, mysql: 1 / 20, redis: 1 / 5 },
  },
  consume10k: {
    label: 'B1 consume 10 KB MB/s',
    metric: 'mbPerSecond',
    target: { postgres: 3, mysql: 3 },
  },
  consume100k: {
    label: 'B1 consume 100 KB MB/s',
    metric: 'mbPerSecond',
    target: { postgres: 3, mysql: 3 },
  },
  sendConcurrent: {
    label: 'B3 concurrent send sends/s',
    metric: 'rate',
    target: { postgres: 8, mysql: 5, redis: 2 },
  },
  sendServerCpu: {
    label: 'B3 server CPU µs/msg',
    run: 'sendConcurrent',
    metric: 'serverCpuPerMessage',
    lowerIsBetter: true,
  },
  sendConcurrent10k: {
    label: 'B3 concurrent send 10 KB MB/s',
    metric: 'mbPerSecond',
    target: { postgres: 3, mysql: 3 },
  },
  sendConcurrent100k: {
    label: 'B3 concurrent send 100 KB MB/s',
    metric: 'mbPerSecond',
    target: { postgres: 3, mysql: 3 },
  },
  sendSequential: {
    label: 'B2 sequential send sends/s',
    metric: 'rate',
    target: { postgres: 1, mysql: 1, redis: 1 },
  },
  wake: {
    label: 'B4 wake-up p50 ms',
    metric: 'p50',
    lowerIsBetter: true,
    aboveFloor: ['postgres', 'mysql', 'redis'],
  },
  wakeP99: {
    label: 'B4 wake-up p99 ms',
    run: 'wake',
    metric: 'p99',
    lowerIsBetter: true,
    absolute: { postgres: 5, mysql: 5, redis: 5 },
  },
  wakeRemote: {
    label: 'B4 wake-up from another process p50 ms',
    metric: 'p50',
    lowerIsBetter: true,
    aboveFloor: ['postgres', 'redis'],
    // MariaDB: the sender ends the consumer process's sleeping wait; SQLite: the file changes.
    absolute: { mysql: 5, sqlite: 5 },
  },
  wakeRemoteP99: {
    label: 'B4 wake-up from another process p99 ms',
    run: 'wakeRemote',
    metric: 'p99',
    lowerIsBetter: true,
    absolute: { mysql: 20, sqlite: 20 },
  },
  competing: {
    label: 'B5 competing consumers msgs/s',
    metric: 'rate',
    target: { postgres: 10, mysql: 10, redis: 2 },
  },
};

module.exports = { RUNS, TARGETS, WAKE_ALLOWANCE_MS };
