'use strict';

const { Envelope } = require('./envelope');
const { SerializationError } = require('./errors');
const { BUILT_IN_STAMPS, NON_SENDABLE_STAMPS } = require('./stamps');

const TYPE_HEADER = 'X-Message-Type';
const STAMPS_HEADER = 'X-Message-Stamps';

/**
 * Serializer producing `{ body, headers }` where `body` is the JSON of the message's own
 * enumerable properties and the headers `X-Message-Type` / `X-Message-Stamps` carry the
 * message class name and the sendable stamps. Decoding rebuilds instances from the class
 * prototype without running constructors.
 */
class JsonSerializer {
  #types = new Map();

  /** @param {readonly {name: string, prototype: object}[]} [messageTypes] */
  constructor(messageTypes = []) {
    for (const type of [...BUILT_IN_STAMPS, ...messageTypes]) {
      this.#types.set(type.name, type);
    }
  }

  /** @param {Envelope} envelope */
  encode(envelope) {
    const message = envelope.message;
    const stamps = [];
    for (const [stampType, group] of envelope.all()) {
      if (NON_SENDABLE_STAMPS.has(stampType)) {
        continue;
      }
      for (const stamp of group) {
        stamps.push({ type: stampType.name, data: { ...stamp } });
      }
    }
    return {
      body: JSON.stringify({ ...message }),
      headers: {
        [TYPE_HEADER]: message.constructor.name,
        [STAMPS_HEADER]: JSON.stringify(stamps),
      },
    };
  }

  /** @param {{body: string, headers: Readonly<Record<string, string>>}} encoded */
  decode(encoded) {
    const headers = encoded.headers ?? {};
    const typeName = headers[TYPE_HEADER];
    if (typeof typeName !== 'string' || typeName === '') {
      throw new SerializationError(`Encoded envelope is missing the "${TYPE_HEADER}" header.`);
    }

    const body = parseJson(encoded.body);
    if (!isPlainObjectLike(body)) {
      throw new SerializationError('Encoded body must be a JSON object.');
    }
    const message = this.#instantiate(typeName, body);

    const stamps = [];
    const rawStamps = headers[STAMPS_HEADER];
    if (rawStamps !== undefined) {
      const entries = parseJson(rawStamps);
      if (!Array.isArray(entries)) {
        throw new SerializationError(`Header "${STAMPS_HEADER}" must encode an array.`);
      }
      for (const entry of entries) {
        if (!isPlainObjectLike(entry)) {
          throw new SerializationError('Encoded stamp must be an object.');
        }
        if (typeof entry.type !== 'string') {
          throw new SerializationError('Encoded stamp is missing a string "type".');
        }
        if (typeof entry.data !== 'object' || entry.data === null) {
          throw new SerializationError('Encoded stamp is missing its "data" object.');
        }
        stamps.push(this.#instantiate(entry.type, entry.data));
      }
    }

    return new Envelope(message, stamps);
  }

  #instantiate(typeName, data) {
    const type = this.#types.get(typeName);
    if (type === undefined) {
      throw new SerializationError(`No type "${typeName}" is registered with the serializer.`);
    }
    return Object.assign(Object.create(type.prototype), data);
  }
}

function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch (cause) {
    throw new SerializationError('Failed to parse encoded envelope as JSON.', { cause });
  }
}

function isPlainObjectLike(value) {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

module.exports = { JsonSerializer };
