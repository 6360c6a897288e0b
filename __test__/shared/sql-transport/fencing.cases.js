'use strict';

// Fenced settles (as in the frozen-consumer fault scenario): an ack or a reject that comes
// after its claim lapsed and another consumer took the row over leaves the newer delivery
// alone, and is counted in stats().staleSettles; acking a find() result still deletes by id.
// The lapse is made in the database (the claim's delivered_at moved an hour back: what a
// consumer frozen for an hour looks like to the others). Part of the shared SqlTransport suite
// (../sql-transport.suite.js).

const { envelopeOf, idOf, receiveOne, pollUntil, sleep } = require('../../support/transport-helpers');

/**
 * How far ahead of the clock a claim's stamp may run on PostgreSQL: a tenth of the lease, at
 * most 100 ms (src/engines/sql/claim_doubt.rs). A real takeover comes a lease after the first
 * claim, so its stamp is always a later one; the lapse made in the database here comes at once,
 * so the takeover waits for the first stamp to pass, or the two claims would share a stamp (and
 * a token) about one time in a hundred and the stale settle would land.
 */
const STAMP_LEAD_MS = 100;

/** Registers the cases of this part for the engine of `ctx`. */
function fencingCases(ctx) {
  const { TABLE, db, transport, lastQueue, settledRows } = ctx;

  /**
   * A message delivered to `stale` whose claim then lapsed and that `current` took over:
   * both hold an envelope of the same row.
   */
  async function takenOver() {
    const stale = transport({ redeliverTimeoutSeconds: 1 });
    const queueName = lastQueue();
    const current = transport({ queueName, redeliverTimeoutSeconds: 1 });
    await stale.send(envelopeOf('fenced', 'f'));
    const first = await receiveOne(stale);
    await sleep(STAMP_LEAD_MS + 10);
    await db.lapseClaim(TABLE, idOf(first));
    const second = await receiveOne(current, 3000);
    expect(idOf(second)).toBe(idOf(first));
    return { stale, current, first, second, queueName };
  }

  /**
   * Waits (2 s) for `t`'s write-behind ack to be counted as stale; if it is not, the failure
   * says what the transport and the server were doing (a stall, or an ack that landed).
   */
  async function expectStaleSettle(t) {
    if (await pollUntil(() => t.stats().staleSettles === 1, { timeoutMs: 2000 })) return;
    const activity = await db.activity?.();
    throw new Error(`the stale ack was not counted within 2 s: ${JSON.stringify({ stats: t.stats(), activity })}`);
  }

  describe('fenced settles', () => {
    it('ignores the ack of a delivery whose claim lapsed and was taken over, and counts it', async () => {
      const { stale, current, first, second, queueName } = await takenOver();
      expect(stale.stats().staleSettles).toBe(0);

      await stale.ack(first);
      await expectStaleSettle(stale);
      const [row] = await db.rows(TABLE, queueName);
      expect(row?.id).toBe(idOf(first));
      expect(row.delivered_at).not.toBeNull();

      await current.ack(second);
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
      expect(current.stats().staleSettles).toBe(0);
    });

    it('ignores the reject of a delivery taken over: no copy, the newer delivery untouched', async () => {
      const { stale, current, first, second, queueName } = await takenOver();

      await stale.reject(first);
      expect(stale.stats().staleSettles).toBe(1);
      const rows = await db.rows(TABLE, queueName);
      expect(rows.map((r) => r.id)).toEqual([idOf(first)]);

      await current.reject(second);
      const [copy] = await settledRows(TABLE, queueName, 1);
      expect(copy.id).not.toBe(idOf(first));
      expect(current.stats().staleSettles).toBe(0);
    });

    it('acks a find() result by id, whoever holds its claim', async () => {
      const { stale, current, first, second, queueName } = await takenOver();
      const operator = transport({ queueName });
      const found = await operator.find(idOf(second));
      await operator.ack(found);
      expect(await settledRows(TABLE, queueName, 0)).toHaveLength(0);
      expect(operator.stats().staleSettles).toBe(0);
      await current.ack(second);
      await stale.ack(first);
      await expectStaleSettle(current);
      await expectStaleSettle(stale);
    });
  });
}

module.exports = { fencingCases };
