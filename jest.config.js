'use strict';

/** @type {import('jest').Config} */
module.exports = {
  testEnvironment: 'node',
  testMatch: ['<rootDir>/__test__/**/*.test.js'],
  // No global testTimeout: the conformance suite runs under jest's default 5 s per test and
  // hook, as the core specifies. Tests that need longer say so themselves.
};
