'use strict';

// Fault scenario: TLS is verified when the DSN asks for it. On private
// PostgreSQL and MariaDB servers that serve TLS with a certificate signed by a CA made for the
// test (support/tls-files.js), a DSN asking for a verified connection (PostgreSQL
// `sslmode=verify-full&sslrootcert=…`, MySQL `ssl-mode=VERIFY_IDENTITY&ssl-ca=…`):
//
// - round-trips a message when the certificate names the host connected to, over sessions the
//   server sees encrypted;
// - is refused with TransportConnectionError, a message that says why, and nothing stored,
//   when the certificate names another host only, or when the CA given did not sign it;
// - and a DSN that requires TLS (`sslmode=require`, `ssl-mode=REQUIRED`) is refused by a
//   server without TLS instead of falling back to plaintext.
//
// Every DSN carries a password the server does not need (PostgreSQL: trust) or accepts
// (MariaDB), so the only thing that can refuse a connection is TLS; no error may show it.
// Redis over TLS is __test__/redis/redis.tls.test.js.

const { TransportConnectionError } = require('@schally/nestjs-messenger');
const { SqlTransport } = require('../..');
const { makeTlsFiles } = require('../support/tls-files');
const { serializer, envelopeOf, idOf, receiveOne, settleWithin, failure, expectNoSecret } = require('../support/transport-helpers');
const { SECRET, uniqueTag, tlsEngines } = require('./support/tls');

/** Short, so that a refusal that waited for a timeout instead of failing at once shows. */
const CONNECT_TIMEOUT_MS = 3000;

describe.each(['postgres', 'mariadb'])('%s: TLS verified when the DSN asks for it', (engineName) => {
  const engine = tlsEngines[engineName];
  let tls;
  /** Signed by the test CA for 127.0.0.1 and localhost. */
  let good;
  /** Signed by the same CA for wrong.example only. */
  let wrongHost;
  /** No TLS at all. */
  let plain;
  const transports = [];

  function transport(dsn, queue) {
    const t = new SqlTransport({ dsn, queueName: queue, serializer: serializer(), connectTimeoutMs: CONNECT_TIMEOUT_MS, ackMode: 'commit' });
    transports.push(t);
    return t;
  }

  /**
   * A send and a first get() on `dsn` both reject with TransportConnectionError, at once (not
   * after a timeout), without the password; nothing is stored on `server`. Resolves to the
   * messages, for the caller to check that they say why.
   */
  async function expectRefused(server, dsn) {
    const queue = uniqueTag('tls');
    const t = transport(dsn, queue);
    const messages = [];
    for (const operation of [() => t.send(envelopeOf('refused')), () => t.get(new AbortController().signal).next()]) {
      const { error, elapsedMs } = await failure(operation);
      expect(error).toBeInstanceOf(TransportConnectionError);
      expect(error.message).toMatch(new RegExp(`^${engine.label} transport failed during "`));
      expect(elapsedMs).toBeLessThan(CONNECT_TIMEOUT_MS);
      expectNoSecret(error, SECRET, encodeURIComponent(SECRET));
      messages.push(error.message);
    }
    expect(await engine.storedRows(server, queue)).toBe(0);
    return messages;
  }

  beforeAll(async () => {
    tls = makeTlsFiles();
    const wrong = tls.issue('wrong-host', 'DNS:wrong.example');
    good = await engine.start({ cert: tls.cert, key: tls.key });
    wrongHost = await engine.start(wrong);
    plain = await engine.start(undefined);
  }, 180_000);

  // Bounded: close() waits for messages in flight, and a failed test may leave one unacked.
  afterEach(async () => {
    await Promise.all(transports.splice(0).map((t) => settleWithin(t.close(), 3000)));
  }, 10_000);

  afterAll(async () => {
    for (const server of [good, wrongHost, plain]) await server?.stop();
    tls?.remove();
  }, 60_000);

  it.each(['127.0.0.1', 'localhost'])(
    'a certificate naming the host (%s) is accepted: send, get, ack over encrypted sessions',
    async (host) => {
      const queue = uniqueTag('tls');
      const tag = uniqueTag('nmn_tls');
      const t = transport(engine.dsn(good, { host, params: engine.verified(tls.ca), tag }), queue);
      const sent = await t.send(envelopeOf('secure', 'over tls'));
      const received = await receiveOne(t, 5000);
      expect(idOf(received)).toBe(idOf(sent));
      expect(received.message).toEqual(envelopeOf('secure', 'over tls').message);

      // The server, not the client, says the transport's sessions are encrypted.
      const encrypted = await engine.sessionsEncrypted(good, tag);
      expect(encrypted.length).toBeGreaterThan(0);
      expect(encrypted.every(Boolean)).toBe(true);

      await t.ack(received);
      expect(await engine.storedRows(good, queue)).toBe(0);
    },
    30_000,
  );

  it.each(['127.0.0.1', 'localhost'])(
    'a certificate from the trusted CA that names another host only is refused (connecting to %s)',
    async (host) => {
      const messages = await expectRefused(wrongHost, engine.dsn(wrongHost, { host, params: engine.verified(tls.ca) }));
      for (const message of messages) {
        // Says that the certificate is the problem, for which name, and which name it has.
        expect(message).toMatch(/certificate/i);
        expect(message).toContain(host);
        expect(message).toContain('wrong.example');
      }
    },
    30_000,
  );

  it('a certificate the given CA did not sign is refused', async () => {
    const messages = await expectRefused(good, engine.dsn(good, { params: engine.verified(tls.otherCa) }));
    for (const message of messages) {
      expect(message).toMatch(/certificate/i);
      expect(message).toMatch(/issuer|not trusted|unknown ca/i);
    }
  }, 30_000);

  it.each([
    ['requires TLS', () => engine.required()],
    ['asks for verified TLS', () => engine.verified(tls.ca)],
  ])('a DSN that %s is refused by a server without TLS (no plaintext fallback)', async (_, params) => {
    const messages = await expectRefused(plain, engine.dsn(plain, { params: params() }));
    for (const message of messages) expect(message).toMatch(/TLS|SSL/);
  }, 30_000);
});
