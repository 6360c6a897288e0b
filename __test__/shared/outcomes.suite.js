'use strict';

// Every rejected write says what it did to storage, as `error.outcome`: 'not-applied' (nothing
// was written: a retry stores it once) or 'unknown' (it went out and no answer came). Written
// once and run by <engine>.errors.test.js on every engine: refusals before anything went out
// (a closed transport, an envelope without an id, an unreachable server, a full backlog), for
// send, ack (both modes) and reject. The 'unknown' side needs a reply that is lost: it is shown
// by the fault suites (faults/ambiguous-write, lifecycle/close-unwritten-acks).

const { Envelope, TransportMessageIdStamp } = require('@schally/nestjs-messenger');
const { closedPort } = require('../support/ports');
const { serializer, envelopeOf, receiveOne, failure, closeAll } = require('../support/transport-helpers');

/**
 * Registers the outcome cases for one engine.
 * @param {object} engine an engine adapter of support/engines
 */
function outcomesSuite(engine) {
  describe(`${engine.errorLabel}: error.outcome on every rejected write`, () => {
    const transports = [];
    const make = (dsn, options = {}) => {
      const t = new engine.Transport({ dsn, ...engine.target('outcome'), serializer: serializer(), ...options });
      transports.push(t);
      return t;
    };

    beforeAll(async () => {
      await engine.requireServer?.();
    });

    afterEach(async () => {
      await closeAll(transports.splice(0));
    });

    it('send, ack and reject on a closed transport: not-applied', async () => {
      for (const ackMode of ['write-behind', 'commit']) {
        const t = make(engine.runDsn('nmn-outcome'), { ackMode });
        await t.send(envelopeOf('before close'));
        const received = await receiveOne(t);
        await t.ack(received);
        await t.close();
        const outcomes = {};
        for (const [name, operation] of [
          ['send', () => t.send(envelopeOf('after close'))],
          ['ack', () => t.ack(received)],
        ]) {
          const { error } = await failure(operation);
          outcomes[name] = error?.outcome;
        }
        expect({ ackMode, ...outcomes }).toEqual({ ackMode, send: 'not-applied', ack: 'not-applied' });
      }
    });

    it('ack and reject of an envelope with no transport id: not-applied', async () => {
      const t = make(engine.runDsn('nmn-outcome'));
      const bare = new Envelope({ n: 1 });
      const ack = await failure(() => t.ack(bare));
      const reject = await failure(() => t.reject(bare));
      expect([ack.error?.outcome, reject.error?.outcome]).toEqual(['not-applied', 'not-applied']);
    });

    it('a send the serializer cannot encode: not-applied', async () => {
      const t = make(engine.runDsn('nmn-outcome'));
      const circular = { self: undefined };
      circular.self = circular;
      const { error } = await failure(() => t.send(new Envelope(circular)));
      expect(error).toBeDefined();
      expect(error.outcome).toBe('not-applied');
    });

    if (engine.server) {
      it('send, delayed send and acks (both modes) to an unreachable server: not-applied', async () => {
        const dsn = engine.dsnWith({ port: await closedPort() });
        const found = new Envelope({ n: 1 }).with(new TransportMessageIdStamp(engine.kind === 'redis' ? '1-0' : '1'));
        const outcomes = {};
        for (const [name, operation] of [
          ['send', (t) => t.send(envelopeOf('x'))],
          ['ack (commit)', (t) => t.ack(found)],
        ]) {
          const { error } = await failure(() => operation(make(dsn, { ackMode: 'commit' })));
          outcomes[name] = `${error?.code} ${error?.outcome}`;
        }
        expect(outcomes).toEqual({
          send: 'E_CONNECTION not-applied',
          'ack (commit)': 'E_CONNECTION not-applied',
        });
      }, 20_000);
    }

    it('a full send backlog: E_BACKLOG_FULL, not-applied', async () => {
      const t = make(engine.runDsn('nmn-outcome'), { maxQueuedSends: 1 });
      const sends = Array.from({ length: 50 }, (_, n) => t.send(envelopeOf(`b${n}`)).then(() => undefined, (error) => error));
      const refused = (await Promise.all(sends)).filter((error) => error !== undefined);
      expect(refused.length).toBeGreaterThan(0);
      for (const error of refused) expect(`${error.code} ${error.outcome}`).toBe('E_BACKLOG_FULL not-applied');
    });
  });
}

module.exports = { outcomesSuite };
