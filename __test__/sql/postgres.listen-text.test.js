'use strict';

// What operators (and upstream's own suite) look for in pg_stat_activity to find a consumer's
// listening connection: the text upstream's transport sends, `LISTEN <table>`, unquoted and
// without a semicolon. Our listener must show the same text, beside an upstream listener on
// the same table, and keep showing it after its periodic liveness check (every 10 s).

const { SqlTransport: UpstreamSqlTransport } = require('@schally/nestjs-messenger-transport-sql');
const { SqlTransport } = require('../..');
const { postgres, uniqueName } = require('../support/engines');
const { serializer, pollUntil } = require('../support/transport-helpers');
const { sqlTable } = require('../support/sql-table');

const { TABLE, db, track, queue, consume } = sqlTable(postgres, { dsn: postgres.dsn, prefix: 'nmn_lt' });

/** postgres.dsn under an application_name of its own, so its backends can be told apart. */
function dsnFor(app) {
  return `${postgres.dsn}${postgres.dsn.includes('?') ? '&' : '?'}application_name=${app}`;
}

/** The pid and query text of the backend of `app` whose last statement was a LISTEN. */
async function listening(app) {
  const rows = await db.query("SELECT pid, query FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'", [
    app,
  ]);
  return rows[0];
}

test('our listener shows upstream’s `LISTEN <table>` in pg_stat_activity, beside an upstream one, and keeps it', async () => {
  const queueName = queue('listen_text');
  const nativeApp = uniqueName('nmn_lt_native');
  const upstreamApp = uniqueName('nmn_lt_up');
  const options = { tableName: TABLE, queueName, serializer: serializer() };
  consume(track(new SqlTransport({ ...options, dsn: dsnFor(nativeApp) })));
  consume(track(new UpstreamSqlTransport({ ...options, dsn: dsnFor(upstreamApp) })));

  const upstreamListener = await pollUntil(() => listening(upstreamApp), { timeoutMs: 5000 });
  const nativeListener = await pollUntil(() => listening(nativeApp), { timeoutMs: 5000 });
  expect(upstreamListener?.query).toBe(`LISTEN ${TABLE}`);
  expect(nativeListener?.query).toBe(upstreamListener.query);

  // Past the liveness period (10 s): the check ran on that connection and left the text as is.
  await new Promise((resolve) => setTimeout(resolve, 11000));
  expect(await listening(nativeApp)).toEqual(nativeListener);
}, 20000);
