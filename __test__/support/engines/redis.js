'use strict';

// Redis as the shared suites see it: the registry's engine (bench/engines.js) plus the words,
// DSN forms, throwaway password server and values its cases use.

const { redis: engine, requireServer } = require('../../../bench/engines');
const { startRedisServer } = require('../redis-server');
const { transportOperations } = require('../transport-helpers');
const { dsnWith } = require('./dsn');

const redis = {
  ...engine,
  get Transport() {
    return require('../../..').RedisStreamsTransport;
  },
  /** Options naming a stream of its own. */
  target: (prefix = 'err') => ({ stream: engine.uniqueStream(prefix) }),
  /** Removes a target's stream and its default delayed zset. */
  removeTarget: (target, dsn) => engine.admin(dsn).del([target.stream, `${target.stream}:delayed`]),
  errorLabel: 'Redis',
  /** The database a test file works in: the shared server (each test on a stream of its own). */
  runDsn: () => engine.dsn,
  requireServer: () => requireServer(engine),
  dsnWith: (parts) => dsnWith(engine.dsn, parts),

  /** Every operation that reaches the server; a delayed send is a write of its own (ZADD). */
  operations: () => transportOperations({ findId: '1-0', delayed: true }),
  silentServerOperation: 'get',
  rawPasswordDsn: (user, rawPassword, port) => `redis://${user}:${rawPassword}@127.0.0.1:${port}/2`,
  malformedDsns: (secret) => [
    `redis://:${secret}@127.0.0.1:99999999`,
    `redis://user:${secret}@[bad`,
    `http://user:${secret}@127.0.0.1:6379`,
    `redis://:${secret}@127.0.0.1:6379/notadb`,
  ],
  /** Databases are numbers; there is no unknown one to name. */
  unknownDatabase: undefined,
  auth: {
    title: 'password authentication (throwaway redis-server with requirepass)',
    failsWithinMs: 2000,
    refusal: /auth|password|WRONGPASS/i,
    /** `error.cause`: the server's reply prefix as `code`. */
    cause: { code: 'WRONGPASS' },
    /** A throwaway redis-server with requirepass `password`. */
    async start(password) {
      const server = await startRedisServer({ args: ['--requirepass', password] });
      const dsn = (pw, user = '') => `redis://${user}:${pw}@127.0.0.1:${server.port}`;
      return { port: server.port, dsn, rawDsn: (raw) => dsn(raw), stop: () => server.stop() };
    },
  },
};

module.exports = { redis };
