'use strict';

// The same PostgreSQL DSN never gets weaker TLS than `pg` (the TypeScript transport's driver)
// gives it: on a private server whose certificate a CA made for the test signed (trusted by
// nobody unless the DSN names it in `sslrootcert`), each `sslmode` form connects with this
// transport exactly when it connects with `pg`. That is `pg` 8's reading: `prefer`, `require`
// and `verify-ca` verify like `verify-full`, `no-verify` encrypts without verifying, and
// `uselibpqcompat=true` gives libpq's meanings (`require` unverified; `verify-ca` needs
// `sslrootcert`).

const { Client } = require('pg');
const { TransportConnectionError } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { makeTlsFiles } = require('../support/tls-files');
const { serializer, envelopeOf } = require('../support/transport-helpers');
const { tlsEngines, uniqueTag } = require('./support/tls');

const CONNECT_TIMEOUT_MS = 3000;

/** `[query, expected]`: whether both drivers connect with it. */
const MODES = (ca) => [
  ['sslmode=prefer', 'refused'],
  ['sslmode=require', 'refused'],
  ['sslmode=verify-ca', 'refused'],
  ['sslmode=verify-full', 'refused'],
  ['ssl=true', 'refused'],
  [`sslmode=require&sslrootcert=${ca}`, 'connected'],
  [`sslmode=verify-ca&sslrootcert=${ca}`, 'connected'],
  ['sslmode=no-verify', 'connected'],
  ['sslmode=disable', 'connected'],
  ['uselibpqcompat=true&sslmode=prefer', 'connected'],
  ['uselibpqcompat=true&sslmode=require', 'connected'],
  ['uselibpqcompat=true&sslmode=verify-ca', 'refused'],
  [`uselibpqcompat=true&sslmode=verify-ca&sslrootcert=${ca}`, 'connected'],
  ['uselibpqcompat=true&sslmode=verify-full', 'refused'],
];

async function withPg(dsn) {
  let client;
  try {
    client = new Client({ connectionString: dsn, connectionTimeoutMillis: CONNECT_TIMEOUT_MS });
    client.on('error', () => {});
    await client.connect();
    return 'connected';
  } catch {
    return 'refused';
  } finally {
    await client?.end().catch(() => {});
  }
}

async function withNative(dsn) {
  let transport;
  try {
    // A DSN whose TLS parameters cannot be honoured is refused here, as pg refuses it.
    transport = new SqlTransport({ dsn, queueName: uniqueTag('mode'), serializer: serializer(), connectTimeoutMs: CONNECT_TIMEOUT_MS, ackMode: 'commit' });
    await transport.send(envelopeOf('tls mode'));
    return 'connected';
  } catch (error) {
    if (!(error instanceof TransportConnectionError)) throw error;
    return 'refused';
  } finally {
    await transport?.close().catch(() => {});
  }
}

describe('PostgreSQL: sslmode means what it means to pg', () => {
  const engine = tlsEngines.postgres;
  let tls;
  let server;

  beforeAll(async () => {
    tls = makeTlsFiles();
    server = await engine.start({ cert: tls.cert, key: tls.key });
  }, 180_000);

  afterAll(async () => {
    await server?.stop();
    tls?.remove();
  }, 60_000);

  it('every sslmode form connects here exactly when it connects with pg', async () => {
    const warn = console.warn;
    console.warn = () => {}; // pg's notice that prefer/require/verify-ca now verify
    const outcomes = [];
    try {
      for (const [query] of MODES(tls.ca)) {
        const dsn = engine.dsn(server, { host: 'localhost', params: query });
        outcomes.push([query, await withPg(dsn), await withNative(dsn)]);
      }
    } finally {
      console.warn = warn;
    }
    expect(outcomes).toEqual(MODES(tls.ca).map(([query, expected]) => [query, expected, expected]));
  }, 120_000);
});
