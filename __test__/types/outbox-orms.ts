// Compile-only check of docs/outbox.md's outbox lines for TypeORM and MikroORM against the ORMs'
// own declarations (npm run test:types); __test__/sql/outbox-orm.test.js runs them.
import { Envelope } from '@schally/nestjs-messenger';
import type { DataSource } from 'typeorm';
import type { EntityManager } from '@mikro-orm/postgresql';
import { SqlTransport } from '../..';

class OrderPlaced {
  constructor(readonly orderId: string) {}
}

export async function withTypeOrm(dataSource: DataSource, transport: SqlTransport): Promise<void> {
  const envelope = new Envelope(new OrderPlaced('o-1'));
  await dataSource.transaction(async (manager) => {
    const { text, values } = transport.outboxStatement(envelope);
    await manager.query(text, values);
  });
}

export async function withMikroOrm(em: EntityManager, transport: SqlTransport): Promise<void> {
  const envelope = new Envelope(new OrderPlaced('o-1'));
  await em.transactional(async (em) => {
    const { text, values } = transport.outboxStatement(envelope, { placeholders: '?' });
    await em.execute(text, values);
  });
}
