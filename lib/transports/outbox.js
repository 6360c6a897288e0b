'use strict';

const { sqlOutboxStatement } = require('../native/addon');
const { invalidArgument, nativeSync } = require('../native/errors');
const { encodeEnvelope } = require('../codec/envelope-codec');

/**
 * The transactional outbox of one SQL transport: the statement that stores an envelope exactly
 * as `send()` would, built once, for the app to run with its own client in its own transaction.
 */
class Outbox {
  #dialect;
  #text;
  #names;
  #serializer;
  #queueName;
  #channel;
  /** The text with `?` for PostgreSQL's `$n`, and which value each `?` takes (built on first use). */
  #questionMarks;

  /**
   * @param {{ dsn: string, dialect: string, tableName: string, queueName: string, useNotify: boolean,
   *   serializer: import('@schally/nestjs-messenger').Serializer }} options
   */
  constructor({ dsn, dialect, tableName, queueName, useNotify, serializer }) {
    const statement = nativeSync(() => sqlOutboxStatement(dsn, tableName, useNotify));
    this.#dialect = dialect;
    this.#text = statement.text;
    this.#names = statement.values;
    this.#serializer = serializer;
    this.#queueName = queueName;
    this.#channel = tableName;
  }

  /**
   * @param {import('@schally/nestjs-messenger').Envelope} envelope
   * @param {import('../index').OutboxStatementOptions} [options]
   * @returns {import('../index').OutboxStatement}
   */
  statement(envelope, { placeholders = 'native' } = {}) {
    if (placeholders !== 'native' && placeholders !== '?') {
      throw invalidArgument(`Invalid placeholders ${JSON.stringify(placeholders)}: expected 'native' or '?'.`);
    }
    const { body, headers, delayMs } = encodeEnvelope(this.#serializer, envelope);
    const value = {
      queue: this.#queueName,
      body,
      headers,
      delayMs,
      delayMicros: Math.round(delayMs * 1000),
      channel: this.#channel,
    };
    const values = this.#names.map((name) => value[name]);
    if (placeholders === 'native' || this.#dialect !== 'postgres') {
      return { dialect: this.#dialect, text: this.#text, values };
    }
    // Knex and MikroORM number `?` themselves on PostgreSQL: one value per occurrence.
    if (this.#questionMarks === undefined) {
      const order = [];
      const text = this.#text.replace(/\$(\d+)/g, (_, n) => {
        order.push(Number(n) - 1);
        return '?';
      });
      this.#questionMarks = { text, order };
    }
    const { text, order } = this.#questionMarks;
    return { dialect: this.#dialect, text, values: order.map((i) => values[i]) };
  }
}

module.exports = { Outbox };
