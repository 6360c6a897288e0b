'use strict';

// Which host gets the send path served on the event loop's own thread (lib/native/host.js): Node.js
// only. Bun and Deno both call themselves "node" in process.release; their processes' own
// answers are in bun-deno.test.js, these are their marks as each one sets them.

const { isNodeHost } = require('../../lib/native/host');

const nodeProcess = (versions = {}) => ({
  release: { name: 'node' },
  versions: { node: '26.3.0', uv: '1.52.1', v8: '14.6.202.34-node.20', ...versions },
});

describe('isNodeHost', () => {
  test('this Node.js process', () => {
    expect(isNodeHost()).toBe(true);
  });

  test.each([
    ['Bun', { process: nodeProcess({ bun: '1.4.5' }), Bun: {} }],
    ['Bun, its global alone', { process: nodeProcess(), Bun: {} }],
    ['Deno', { process: nodeProcess({ deno: '2.9.6' }), Deno: {} }],
    ['Deno, its global alone', { process: nodeProcess(), Deno: {} }],
    ['a host without process', {}],
    ['a host without libuv', { process: { release: { name: 'node' }, versions: { node: '26.3.0' } } }],
    ['a host that is not Node.js by name', { process: { ...nodeProcess(), release: { name: 'other' } } }],
  ])('not %s', (_name, global) => {
    expect(isNodeHost(global)).toBe(false);
  });

  test('a process that says it is Node.js and shows no other runtime', () => {
    expect(isNodeHost({ process: nodeProcess() })).toBe(true);
  });
});
