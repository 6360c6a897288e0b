'use strict';

// A DSN as the addon shows it in its own messages (src/dsn.rs): the userinfo's password and
// any `password=`/`pass=` query parameter replaced by `***`, in every form they are written.
// The addon exports no redaction function, so this follows its rule; a test holds the two to
// the same output on the DSNs the addon echoes back.

/**
 * The userinfo's `[start, end)` in `dsn`, or undefined. A password may hold unescaped `@`,
 * `/`, `?` or `#`, which would end a URL parser's authority early: when `user:` starts the
 * authority and an `@` follows anywhere later, everything up to the last `@` is userinfo
 * (redacting too much is safe, too little is not).
 * @param {string} dsn
 * @returns {[number, number] | undefined}
 */
function userinfoSpan(dsn) {
  const scheme = dsn.indexOf('://');
  if (scheme < 0) return undefined;
  const start = scheme + 3;
  const rest = dsn.slice(start);
  const stop = rest.search(/[/?#]/);
  const authorityLength = stop < 0 ? rest.length : stop;
  const colon = rest.indexOf(':');
  const lastAt = rest.lastIndexOf('@');
  if (colon >= 0 && lastAt >= 0 && colon < authorityLength && colon < lastAt && !rest.slice(0, colon).includes('@')) {
    return [start, start + lastAt];
  }
  const at = rest.slice(0, authorityLength).lastIndexOf('@');
  return at < 0 ? undefined : [start, start + at];
}

/** Each password in `dsn`, as written and percent-decoded, longest first. */
function secretsOf(dsn) {
  const secrets = [];
  const push = (raw) => {
    if (raw === '') return;
    secrets.push(raw);
    try {
      const decoded = decodeURIComponent(raw);
      if (decoded !== raw) secrets.push(decoded);
    } catch {
      // not valid percent-encoding: only the raw form can appear
    }
  };
  const span = userinfoSpan(dsn);
  if (span !== undefined) {
    const userinfo = dsn.slice(span[0], span[1]);
    const colon = userinfo.indexOf(':');
    if (colon >= 0) push(userinfo.slice(colon + 1));
  }
  const query = dsn.indexOf('?');
  if (query >= 0) {
    for (const pair of dsn.slice(query + 1).split('&')) {
      const eq = pair.indexOf('=');
      if (eq < 0) continue;
      const key = pair.slice(0, eq).toLowerCase();
      if (key === 'password' || key === 'pass') push(pair.slice(eq + 1));
    }
  }
  return secrets.sort((a, b) => b.length - a.length);
}

/**
 * `dsn` with every password replaced by `***`, safe to print.
 * @param {string} dsn
 * @returns {string}
 */
function redactDsn(dsn) {
  let out = dsn;
  const span = userinfoSpan(dsn);
  if (span !== undefined) {
    const colon = dsn.slice(span[0], span[1]).indexOf(':');
    if (colon >= 0) out = `${dsn.slice(0, span[0] + colon + 1)}***${dsn.slice(span[1])}`;
  }
  for (const secret of secretsOf(dsn)) out = out.split(secret).join('***');
  return out;
}

module.exports = { redactDsn };
