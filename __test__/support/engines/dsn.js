'use strict';

/**
 * `base` (a server DSN) with some of its parts replaced; parts left out stay as they are.
 * @param {string} base
 * @param {{ scheme?: string, user?: string, password?: string, host?: string, port?: number, database?: string, params?: Record<string, string> }} parts
 */
function dsnWith(base, { scheme, user, password, host, port, database, params } = {}) {
  const url = new URL(base);
  if (user !== undefined) url.username = user;
  if (password !== undefined) url.password = password;
  if (host !== undefined) url.hostname = host;
  if (port !== undefined) url.port = String(port);
  if (database !== undefined) url.pathname = `/${database}`;
  for (const [key, value] of Object.entries(params ?? {})) url.searchParams.set(key, value);
  const text = url.toString();
  return scheme === undefined ? text : text.replace(/^[a-z]+:/, `${scheme}:`);
}

module.exports = { dsnWith };
