'use strict';

// The default `logger`: Nest's own `Logger`, when the app has `@nestjs/common`. Looked up once,
// on the first transport made without a `logger` option, and never required by this package:
// an app without NestJS (a script, Bun or Deno) just does not find it. A `Logger` made with a
// context forwards to whatever logger the app installed (`app.useLogger()`, `bufferLogs`,
// `logger: false` on the app), so the transport's lines go where the app's own lines go.

/** `@nestjs/common` as the app has it: `{ module }`, `{ module: undefined }` when it has not; undefined until looked up. */
let nestCommon;

/**
 * `name` as the app resolves it: from this package's place first (npm's flat tree), then from
 * the working directory (a layout such as pnpm's, where a package sees only what it declares).
 * Any failure (not installed, an ES module this Node.js cannot `require`) is an absence.
 * @param {string} name
 */
function requireFromApp(name) {
  try {
    return require(name);
  } catch {
    try {
      return require(require.resolve(name, { paths: [process.cwd()] }));
    } catch {
      return undefined;
    }
  }
}

/**
 * A Nest `Logger` with `context`, or undefined when the app has no `@nestjs/common`.
 * @param {string} context the transport, by kind and name
 * @returns {import('../index').TransportLogger | undefined}
 */
function nestLogger(context) {
  nestCommon ??= { module: requireFromApp('@nestjs/common') };
  const Logger = nestCommon.module?.Logger;
  return typeof Logger === 'function' ? new Logger(context) : undefined;
}

module.exports = { nestLogger };
