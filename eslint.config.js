'use strict';

// A small JS check of what ships and what runs the demo and the benchmark (`npm run lint:js`).
const js = require('@eslint/js');
const globals = require('globals');

module.exports = [
  { ignores: ['binding.js', 'binding.d.ts', 'node_modules/', 'target/', 'npm/', '__test__/'] },
  js.configs.recommended,
  {
    files: ['**/*.js'],
    languageOptions: { ecmaVersion: 2023, sourceType: 'commonjs', globals: { ...globals.node } },
    rules: {
      'no-unused-vars': ['error', { argsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_' }],
      eqeqeq: ['error', 'always'],
      'prefer-const': 'error',
      'no-var': 'error',
    },
  },
];
