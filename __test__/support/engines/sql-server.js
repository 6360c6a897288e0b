'use strict';

// What the PostgreSQL and MySQL/MariaDB adapters have alike: a SQL engine on a shared server.

const { requireServer, uniqueName } = require('../../../bench/engines');
const { transportOperations } = require('../transport-helpers');
const { dsnWith } = require('./dsn');

/**
 * The adapter of `engine` (the registry's), a SQL engine on the shared server: the members
 * both server engines have alike, then the engine's own (`own`, getters kept as getters) on
 * top.
 */
function sqlServerAdapter(engine, own) {
  const adapter = {
    ...engine,
    /** The transport class of the engine (loaded on first use). */
    get Transport() {
      return require('../../..').SqlTransport;
    },
    /** Options naming a queue of its own. */
    target: (prefix = 'q') => ({ queueName: uniqueName(prefix) }),
    /** Removes what a target's transport stored (its queue's rows in the default table). */
    removeTarget: (target, dsn) => engine.admin(dsn).deleteQueues('messenger_messages', [target.queueName]),
    requireServer: () => requireServer(engine),
    /** Whether raw access works here (it always does on a server). */
    rawAccess: () => true,
    removeRunDsn: () => {},
    /** The engine's DSN with some parts replaced (a closed port, a user, a password …). */
    dsnWith: (parts) => dsnWith(engine.dsn, parts),
    storageNoun: 'table',
    otherDsnNoun: 'another DSN',
    storesTextTimes: false,
    /** Every operation that reaches the server, by name. */
    operations: () => transportOperations(),
    /** What a server that never answers is asked for the default connect timeout. */
    silentServerOperation: 'getMessageCount',
  };
  return Object.defineProperties(adapter, Object.getOwnPropertyDescriptors(own));
}

module.exports = { sqlServerAdapter };
