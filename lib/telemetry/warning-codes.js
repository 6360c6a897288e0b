'use strict';

/**
 * The stable `code` of each warning and error the native side reports, for
 * `process.emitWarning` when there is no logger to tell (an app without `@nestjs/common` and no
 * `logger` option). Native events carry their words only (a level and a message), so the code
 * is read from how each kind begins or what it says; the texts are this package's own. Events
 * made in JavaScript name their code where they are reported (`NMN_POISON_REMOVED`,
 * `NMN_ACKS_UNWRITTEN`). Plain `log` lines (a connection back, acks written again) have none:
 * they are not warnings.
 */
const CODES = [
  { code: 'NMN_CONNECTION_LOST', matches: /^Connection lost: / },
  { code: 'NMN_LISTEN_LOST', matches: /^LISTEN connection lost/ },
  { code: 'NMN_STORAGE_GONE', matches: /: gone under a live consumer / },
  { code: 'NMN_CONSUMER_REFUSED', matches: /^The server refused the consumer/ },
  { code: 'NMN_ACK_WRITES_FAILING', matches: /^Write-behind acks could not be written/ },
  { code: 'NMN_ACK_WRITES_PAST_LEASE', matches: /^Write-behind acks have failed for .* longer than the lease/ },
  { code: 'NMN_EVENTS_DROPPED', matches: /^\d+ earlier events were dropped/ },
];

/** For a warning or error no entry above names (none is expected: a test reads every one in src/). */
const FALLBACK = { warn: 'NMN_WARNING', error: 'NMN_ERROR' };

/**
 * The code of an event reported at `level` (`warn` or `error`).
 * @param {'warn' | 'error'} level
 * @param {string} message the event's text, as the logger would get it
 * @returns {string}
 */
function warningCode(level, message) {
  return CODES.find(({ matches }) => matches.test(message))?.code ?? FALLBACK[level];
}

module.exports = { warningCode };
