'use strict';

const mysql = require('mysql2/promise');
const { MYSQL_DSN } = require('./servers');

/**
 * Runs one statement on a short-lived `mysql2` connection (test set-up and inspection only).
 * @param {string} sql
 * @param {unknown[]} [params]
 */
async function mysqlQuery(sql, params = [], dsn = MYSQL_DSN) {
  const connection = await mysql.createConnection(dsn.replace(/^mariadb:/, 'mysql:'));
  try {
    const [rows] = await connection.query(sql, params);
    return rows;
  } finally {
    await connection.end();
  }
}

module.exports = { mysqlQuery };
