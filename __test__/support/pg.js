'use strict';

const { Client } = require('pg');
const { POSTGRES_DSN } = require('./servers');

/**
 * Runs one statement on a short-lived `pg` connection (test set-up and inspection only).
 * @param {string} sql
 * @param {unknown[]} [params]
 */
async function pgQuery(sql, params = [], dsn = POSTGRES_DSN) {
  const client = new Client({ connectionString: dsn });
  await client.connect();
  try {
    return await client.query(sql, params);
  } finally {
    await client.end();
  }
}

module.exports = { pgQuery };
