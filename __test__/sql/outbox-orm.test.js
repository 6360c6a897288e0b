'use strict';

// The outbox lines of docs/outbox.md for TypeORM and MikroORM, run as written against the real
// servers: the statement goes through the ORM's own transaction, so a commit delivers it
// and a rollback (the business write failing after it) does not. Knex and the bare drivers
// are in outbox.test.js.

const { postgres, mysql, uniqueName } = require('../support/engines');
const { closeAll, envelopeOf, receiveUpTo } = require('../support/transport-helpers');
const { outboxTableReady, outboxTransport } = require('../support/outbox');

const BUSINESS_FAILURE = 'the business write failed';

/**
 * An ORM as an app opens it, and the docs' line that runs the outbox statement inside
 * its transaction. `transaction(run)` commits unless `run` throws.
 */
const orms = [
  ...[
    ['postgres', postgres],
    ['mysql', mysql],
  ].map(([type, engine]) => ({
    name: `TypeORM (${type})`,
    engine,
    async open(dsn) {
      const { DataSource } = require('typeorm');
      const dataSource = new DataSource({ type, url: dsn.replace(/^mariadb:/, 'mysql:'), entities: [] });
      await dataSource.initialize();
      return {
        transaction: (run) =>
          dataSource.transaction(async (manager) => {
            await run(({ text, values }) => manager.query(text, values));
          }),
        placeholders: 'native',
        close: () => dataSource.destroy(),
      };
    },
  })),
  {
    name: 'MikroORM (postgresql)',
    engine: postgres,
    async open(dsn) {
      const { MikroORM } = require('@mikro-orm/postgresql');
      const orm = await MikroORM.init({
        clientUrl: dsn,
        entities: [],
        discovery: { warnWhenNoEntities: false },
        allowGlobalContext: true,
      });
      return {
        transaction: (run) =>
          orm.em.fork().transactional(async (em) => {
            await run(({ text, values }) => em.execute(text, values));
          }),
        placeholders: '?',
        close: () => orm.close(true),
      };
    },
  },
];

describe.each(orms)('outbox through $name', ({ engine, open }) => {
  const transports = [];
  let orm;

  beforeAll(async () => {
    await outboxTableReady(engine);
    orm = await open(engine.dsn);
  }, 20000);

  afterAll(async () => {
    await closeAll(transports);
    await orm?.close();
  });

  it('inside the ORM transaction: a commit delivers once, a rollback never', async () => {
    const transport = outboxTransport(engine, transports, { queueName: uniqueName('oborm') });
    const statementOf = (envelope) => transport.outboxStatement(envelope, { placeholders: orm.placeholders });

    await orm.transaction((query) => query(statementOf(envelopeOf('committed'))));
    await expect(
      orm.transaction(async (query) => {
        await query(statementOf(envelopeOf('rolled-back')));
        throw new Error(BUSINESS_FAILURE);
      }),
    ).rejects.toThrow(BUSINESS_FAILURE);

    const received = await receiveUpTo(transport, 2, 1500);
    expect(received.map((e) => e.message.id)).toEqual(['committed']);
    await transport.ack(received[0]);
    expect(await transport.getMessageCount()).toBe(0);
  }, 20000);
});
