'use strict';

// `redisOptions`, the ioredis options upstream hands to `new Redis(dsn, redisOptions)`, read as
// ioredis reads them: the DSN's own settings win and the options fill in what it leaves out.
// Every key is honoured, accepted as asking nothing of this transport, or refused by name: none
// is dropped in silence. A value the DSN contradicts is refused too (ioredis would drop it).

const { isIP } = require('node:net');
const { invalidArgument } = require('../native/errors');
const { wellFormed } = require('./option-checks');

const PRODUCT = 'nestjs-messenger-native';

/** Keys honoured as ioredis honours them (see `redisConnectionOf`). */
const HONOURED = new Set([
  'host', 'port', 'username', 'password', 'db', 'keyPrefix', 'tls', 'family', 'connectTimeout', 'disableClientInfo', 'path',
  'sentinels', 'name', 'role', 'sentinelUsername', 'sentinelPassword',
]);

/** Keys accepted whatever their value: they shape nothing this transport does. */
const NO_EFFECT = new Set([
  // Connections are made on first use anyway, and a server still loading is waited out.
  'lazyConnect',
  'enableReadyCheck',
  // They shape ioredis's own replies and error stacks, which an app never sees here.
  'showFriendlyErrorStack',
  'stringNumbers',
  // The transport batches its commands itself and subscribes to nothing.
  'enableAutoPipelining',
  'autoPipeliningIgnoredCommands',
  'autoResubscribe',
  'autoResendUnfulfilledCommands',
  // TCP keepalive is always on, with the transport's own timings.
  'keepAlive',
  // Through Sentinel, `+switch-master` is always followed.
  'failoverDetector',
]);

/**
 * ioredis's defaults of keys this transport does not honour: set to its default, such a key
 * asks for nothing more than leaving it out does, and is accepted.
 */
const IOREDIS_DEFAULTS = new Map([
  ['maxRetriesPerRequest', 20],
  ['enableOfflineQueue', true],
  ['readOnly', false],
  ['noDelay', true],
  ['monitor', false],
  ['connectionName', null],
  ['reconnectOnError', null],
  ['maxLoadingRetryTime', 10000],
  ['disconnectTimeout', 2000],
  ['blockingTimeoutGrace', 100],
  ['natMap', null],
  ['enableTLSForSentinelMode', false],
  ['updateSentinels', true],
  ['sentinelMaxConnections', 10],
]);

const RECONNECTS = 'the transport reconnects by itself (backoff up to 2 s) and its consumers wait out an outage';

/** Refused keys with what the transport does instead (any other unknown key is refused too). */
const REFUSED = new Map([
  ['retryStrategy', RECONNECTS],
  ['reconnectOnError', RECONNECTS],
  ['maxRetriesPerRequest', `${RECONNECTS}, while a send fails with TransportConnectionError when the server does not answer within connectTimeoutMs`],
  ['enableOfflineQueue', 'sends wait for the connection (up to maxQueuedSends of them)'],
  ['commandTimeout', 'every command is bounded by connectTimeoutMs'],
  ['socketTimeout', 'every command is bounded by connectTimeoutMs'],
  ['blockingTimeout', 'blocking reads are bounded by the transport itself'],
  ['blockingTimeoutGrace', 'blocking reads are bounded by the transport itself'],
  ['noDelay', 'Nagle\'s algorithm is always off'],
  ['readOnly', 'the transport writes to the server it connects to'],
  ['connectionName', 'its connections cannot be named (the send connection is named "nestjs-messenger-native:send")'],
  ['clientInfoTag', 'the library name its connections report cannot be tagged'],
  ['Connector', 'connections are made by the native client'],
  ['scripts', 'the transport\'s client is not the app\'s'],
  ['monitor', 'the transport\'s connections run its own commands'],
  ['sentinelRetryStrategy', `${RECONNECTS}; the sentinels are asked again whenever the master may have moved`],
  ['sentinelReconnectStrategy', `${RECONNECTS}; the sentinels are asked again whenever the master may have moved`],
  ['sentinelCommandTimeout', 'every exchange with a sentinel is bounded by connectTimeoutMs'],
  ['preferredSlaves', 'the transport writes: it connects to the master only'],
  ['enableTLSForSentinelMode', 'a deployment behind Sentinel is reached without TLS'],
  ['sentinelTLS', 'a deployment behind Sentinel is reached without TLS'],
  ['natMap', 'the addresses the sentinels give are used as they are'],
  ['updateSentinels', 'the sentinels asked are those given'],
  ['sentinelMaxConnections', 'one connection at a time goes to a sentinel'],
]);

/** TLS keys honoured; any other key of `tls` is refused. */
const TLS_KEYS = new Set(['ca', 'cert', 'key', 'servername', 'rejectUnauthorized']);

function refuse(key, why) {
  return invalidArgument(`redisOptions.${key} is not supported by ${PRODUCT}: ${why}.`);
}

function invalid(key, expected) {
  return invalidArgument(`Invalid redisOptions.${key}: expected ${expected}.`);
}

/** Set: given a value other than `undefined` (ioredis fills in only keys left undefined). */
function given(value) {
  return value !== undefined;
}

/** Given a value, `null` meaning none (ioredis's default of the settings it honours). */
function present(value) {
  return value !== undefined && value !== null;
}

/** What the DSN says of the settings redisOptions may also give, read as ioredis reads a URL. */
function dsnSettings(dsn) {
  let url;
  try {
    url = new URL(dsn);
  } catch {
    return {}; // the native side reports a bad DSN
  }
  const decode = (text) => {
    try {
      return decodeURIComponent(text);
    } catch {
      return text;
    }
  };
  const auth = url.username !== '' || url.password !== '';
  return {
    host: url.hostname.replace(/^\[|\]$/g, ''),
    port: url.port === '' ? undefined : Number(url.port),
    username: auth ? decode(url.username) : undefined,
    password: auth ? decode(url.password) : undefined,
    db: url.pathname.length > 1 ? Number(url.pathname.slice(1)) : undefined,
  };
}

/** PEM text of a `tls.ca`/`cert`/`key` value (string, Buffer, or an array of them). */
function pemOf(value, key) {
  const parts = Array.isArray(value) ? value : [value];
  return parts
    .map((part) => {
      if (Buffer.isBuffer(part)) return part.toString('utf8');
      if (typeof part === 'string') return part;
      throw invalid(key, 'PEM text: a string or Buffer, or an array of them');
    })
    .join('\n');
}

/**
 * `redisOptions.tls`: any object turns TLS on, for `redis://` too (as in ioredis), with the
 * trusted CAs, a client certificate, and `rejectUnauthorized: false` accepting any server
 * certificate. `servername` is honoured only as the DSN's host: the name checked is the host's.
 */
function tlsOf(tls, dsn) {
  if (tls === null || typeof tls !== 'object' || Array.isArray(tls) || Buffer.isBuffer(tls)) {
    throw invalid('tls', 'an object of Node.js TLS options (ca, cert, key, servername, rejectUnauthorized)');
  }
  for (const key of Object.keys(tls)) {
    if (present(tls[key]) && !TLS_KEYS.has(key)) {
      throw refuse(`tls.${key}`, 'only tls.ca, tls.cert, tls.key, tls.servername and tls.rejectUnauthorized are honoured');
    }
  }
  const { ca, cert, key, servername, rejectUnauthorized } = tls;
  if (present(cert) !== present(key)) {
    throw invalidArgument('Invalid redisOptions.tls: a client certificate needs both tls.cert and tls.key.');
  }
  if (present(rejectUnauthorized) && typeof rejectUnauthorized !== 'boolean') {
    throw invalid('tls.rejectUnauthorized', 'a boolean');
  }
  if (present(servername)) {
    if (typeof servername !== 'string') throw invalid('tls.servername', 'a string');
    if (dsn.host !== undefined && servername.toLowerCase() !== dsn.host.toLowerCase()) {
      throw refuse('tls.servername', `the name sent and checked is the DSN's host ("${dsn.host}"), not "${servername}"`);
    }
  }
  return {
    tlsCa: present(ca) ? pemOf(ca, 'tls.ca') : undefined,
    tls: true,
    tlsCert: present(cert) ? pemOf(cert, 'tls.cert') : undefined,
    tlsKey: present(key) ? pemOf(key, 'tls.key') : undefined,
    tlsInsecure: rejectUnauthorized === false,
  };
}

/** Whether the DSN asks for TLS by its scheme (`rediss://`). */
function rediss(dsn) {
  return typeof dsn === 'string' && /^rediss:/i.test(dsn);
}

/** Checks one of the settings a DSN may hold; returns it when the DSN leaves it out. */
function settingOf(redisOptions, dsn, key, check) {
  const value = redisOptions[key];
  if (!present(value)) return undefined;
  check(value);
  if (dsn[key] === undefined) return value;
  const same = key === 'host' ? value.toLowerCase() === dsn.host.toLowerCase() : value === dsn[key];
  if (same) return undefined;
  // Never a secret in the message: credentials are named, not shown.
  const shown = key === 'password' || key === 'username' ? '' : ` (${JSON.stringify(value)}, the DSN's ${JSON.stringify(dsn[key])})`;
  throw invalidArgument(
    `redisOptions.${key} differs from the DSN's${shown}: ioredis uses the DSN's and drops redisOptions.${key}; give it in one place.`,
  );
}

const isString = (key) => (value) => {
  if (typeof value !== 'string') throw invalid(key, 'a string');
  wellFormed(value, `redisOptions.${key}`);
};

const isIntegerIn = (key, min, max) => (value) => {
  if (!Number.isInteger(value) || value < min || value > max) throw invalid(key, `an integer from ${min} to ${max}`);
};

/**
 * Reads `options.redisOptions` against `options.dsn`.
 * @returns {{ tlsCa: string | undefined, connectTimeoutMs: number | undefined, overrides: object }}
 *   `connectTimeoutMs`: `connectTimeoutMs`, or else `redisOptions.connectTimeout` (they must agree
 *   when both are given); `overrides`: what the native queue adds to the DSN.
 */
function redisConnectionOf(options) {
  const redisOptions = options.redisOptions ?? {};
  if (typeof redisOptions !== 'object' || Array.isArray(redisOptions)) {
    throw invalidArgument('Invalid redisOptions: expected an object of ioredis options.');
  }
  for (const [key, value] of Object.entries(redisOptions)) {
    if (!given(value) || HONOURED.has(key) || NO_EFFECT.has(key)) continue;
    if (IOREDIS_DEFAULTS.has(key) && Object.is(IOREDIS_DEFAULTS.get(key), value)) continue;
    throw refuse(key, REFUSED.get(key) ?? 'it is not an ioredis option this transport honours (see docs/redis-options.md)');
  }

  const dsn = dsnSettings(typeof options.dsn === 'string' ? options.dsn : '');
  settingOf(redisOptions, dsn, 'host', isString('host'));
  const port = settingOf(redisOptions, dsn, 'port', isIntegerIn('port', 1, 65535));
  const username = settingOf(redisOptions, dsn, 'username', isString('username'));
  const password = settingOf(redisOptions, dsn, 'password', isString('password'));
  const db = settingOf(redisOptions, dsn, 'db', isIntegerIn('db', 0, 2 ** 31 - 1));
  if (db !== undefined && db !== 0 && options.cluster === true) {
    throw refuse('db', 'Redis Cluster has database 0 only');
  }

  const keyPrefix = redisOptions.keyPrefix ?? '';
  isString('keyPrefix')(keyPrefix);

  const { family } = redisOptions;
  if (present(family)) {
    if (![0, 4, 6].includes(family)) throw invalid('family', '0, 4 or 6');
    // An address in the DSN is used as is, whatever the family (as Node.js does).
    if (family !== 0 && dsn.host !== undefined && isIP(dsn.host) === 0) {
      throw refuse('family', `host names are resolved to addresses of both families: put an IPv${family} address in the DSN instead of "${dsn.host}"`);
    }
  }

  const { disableClientInfo } = redisOptions;
  if (present(disableClientInfo) && typeof disableClientInfo !== 'boolean') throw invalid('disableClientInfo', 'a boolean');

  const { connectTimeout } = redisOptions;
  let connectTimeoutMs = options.connectTimeoutMs;
  if (present(connectTimeout)) {
    if (typeof connectTimeout !== 'number' || !Number.isFinite(connectTimeout) || connectTimeout <= 0) {
      throw invalid('connectTimeout', 'a finite number > 0 (ms)');
    }
    if (given(connectTimeoutMs) && connectTimeoutMs !== connectTimeout) {
      throw invalidArgument(
        `redisOptions.connectTimeout (${connectTimeout}) differs from connectTimeoutMs (${String(connectTimeoutMs)}): give one of them.`,
      );
    }
    connectTimeoutMs = connectTimeout;
  }

  const tls = present(redisOptions.tls) ? tlsOf(redisOptions.tls, dsn) : undefined;

  // A Unix socket, as ioredis reads `path`: used instead of the DSN's host and port.
  const { path } = redisOptions;
  if (present(path)) {
    isString('path')(path);
    if (path === '') throw invalid('path', 'the path of the server\'s Unix socket');
    if (options.cluster === true) throw refuse('path', 'a cluster is reached over TCP, through its nodes\' addresses');
    if (tls !== undefined) throw refuse('path', 'TLS is not used over a Unix socket: leave redisOptions.tls out');
    if (rediss(options.dsn)) throw refuse('path', 'TLS is not used over a Unix socket: its DSN must be redis://, not rediss://');
  }

  const sentinel = sentinelOf(redisOptions, options, tls);

  return {
    tlsCa: tls?.tlsCa,
    connectTimeoutMs,
    overrides: {
      keyPrefix,
      tls: tls !== undefined,
      tlsCert: tls?.tlsCert,
      tlsKey: tls?.tlsKey,
      tlsInsecure: tls?.tlsInsecure ?? false,
      port,
      db,
      // ioredis authenticates only with a non-empty password (and names a non-empty user).
      username: username || undefined,
      password: password || undefined,
      disableClientInfo: disableClientInfo === true,
      path: present(path) ? path : undefined,
      ...sentinel,
    },
  };
}

/**
 * ioredis's Sentinel options: `sentinels` (each `{ host = 'localhost', port = 26379 }`) with
 * the master's `name`; the DSN's credentials and database are the master's, its host and port
 * are not used. Only the master is reached (`role: 'master'`): the transport writes.
 */
function sentinelOf(redisOptions, options, tls) {
  const { sentinels, name, role, sentinelUsername, sentinelPassword } = redisOptions;
  if (!present(sentinels)) {
    for (const [key, value] of [['name', name], ['sentinelUsername', sentinelUsername], ['sentinelPassword', sentinelPassword]]) {
      if (present(value)) throw refuse(key, `it applies through Redis Sentinel, with redisOptions.sentinels (for CLIENT SETNAME ioredis uses connectionName, which is not supported)`);
    }
    if (present(role) && role !== 'master') throw refuse('role', 'it applies through Redis Sentinel, with redisOptions.sentinels');
    return {};
  }
  if (!Array.isArray(sentinels) || sentinels.length === 0) {
    throw invalid('sentinels', 'a non-empty array of { host, port } objects');
  }
  const addresses = sentinels.map((sentinel, i) => {
    if (sentinel === null || typeof sentinel !== 'object') throw invalid(`sentinels[${i}]`, 'a { host, port } object');
    const host = sentinel.host ?? 'localhost';
    const port = sentinel.port ?? 26379;
    isString(`sentinels[${i}].host`)(host);
    isIntegerIn(`sentinels[${i}].port`, 1, 65535)(port);
    return { host, port };
  });
  if (typeof name !== 'string' || name === '') throw invalid('name', 'the master\'s name the sentinels know (a non-empty string)');
  wellFormed(name, 'redisOptions.name');
  if (present(role) && role !== 'master') {
    throw refuse('role', 'the transport writes: it connects to the master only (role \'master\')');
  }
  for (const [key, value] of [['sentinelUsername', sentinelUsername], ['sentinelPassword', sentinelPassword]]) {
    if (present(value)) isString(key)(value);
  }
  if (options.cluster === true) throw refuse('sentinels', 'a cluster is reached through its nodes, not through Sentinel');
  if (present(redisOptions.path)) throw refuse('path', 'through Sentinel the master is reached at the address the sentinels give');
  if (tls !== undefined) throw refuse('tls', 'a deployment behind Sentinel is reached without TLS');
  // A rediss:// DSN asks for TLS, which the master found through Sentinel would not get.
  if (rediss(options.dsn)) {
    throw refuse('sentinels', 'a deployment behind Sentinel is reached without TLS: its DSN must be redis://, not rediss://');
  }
  return {
    sentinels: addresses,
    name,
    sentinelUsername: sentinelUsername || undefined,
    sentinelPassword: sentinelPassword || undefined,
  };
}

module.exports = { redisConnectionOf };
