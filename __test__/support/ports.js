'use strict';

// The tests' free and closed loopback ports come from bench/ports.js, which the benchmark's
// throwaway cluster (bench/redis-cluster.js) also uses.

module.exports = require('../../bench/ports');
