'use strict';

/**
 * The targets of the performance issue, native ÷ upstream (higher is better unless `lowerIsBetter`).
 * `metric` names the field of a workload result.
 */
const TARGETS = {
  consume: {
    label: 'B1 consume msgs/s',
    metric: 'rate',
    target: { postgres: 20, mysql: 20, redis: 5 },
  },
  consumeCpu: {
    label: 'B1 main-thread CPU µs/msg',
    workload: 'consume',
    metric: 'mainCpuPerMessage',
    lowerIsBetter: true,
    target: { postgres: 1 / 5, mysql: 1 / 10, redis: 1 / 3 },
  },
  sendConcurrent: {
    label: 'B3 concurrent send sends/s',
    metric: 'rate',
    target: { postgres: 5, mysql: 3, redis: 1.5 },
  },
  sendSequential: {
    label: 'B2 sequential send sends/s',
    metric: 'rate',
    target: { postgres: 1, mysql: 1, redis: 0.8 },
  },
  wake: {
    label: 'B4 wake-up p50 ms',
    metric: 'p50',
    lowerIsBetter: true,
    absolute: { postgres: 1.2, mysql: 2, redis: 1 },
  },
  competing: {
    label: 'B5 competing consumers msgs/s',
    metric: 'rate',
    target: { postgres: 10, mysql: 10, redis: 2 },
  },
};

module.exports = { TARGETS };
