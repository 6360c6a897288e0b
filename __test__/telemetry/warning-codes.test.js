'use strict';

// Every warning and error the native side reports (a `Level::Warn` or `Level::Error` event in
// src/, outside unit tests) has a process-warning code of its own, read from its text by
// lib/telemetry/warning-codes.js: none falls back to the generic NMN_WARNING / NMN_ERROR, and
// no two kinds share a code. The texts are read from the Rust sources, so a new event or a
// reworded one fails here until its code is named.

const fs = require('node:fs');
const path = require('node:path');
const { warningCode } = require('../../lib/telemetry/warning-codes');

const SRC = path.join(__dirname, '..', '..', 'src');

/** The `.rs` files under `dir`. */
function rustFiles(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return rustFiles(full);
    return entry.name.endsWith('.rs') ? [full] : [];
  });
}

/**
 * Each warn/error event's text in src/ as the logger would get it, its `{…}` placeholders filled
 * with a digit: `{ level, text, file }`.
 */
function reportedEvents() {
  const event = /Level::(Warn|Error),\s*(?:message:\s*)?(?:format!\(\s*)?"((?:[^"\\]|\\.)*)"/g;
  return rustFiles(SRC).flatMap((file) => {
    const source = fs.readFileSync(file, 'utf8').split('#[cfg(test)]')[0];
    return [...source.matchAll(event)].map(([, level, text]) => ({
      level: level.toLowerCase(),
      text: text.replace(/\{[^}]*\}/g, '1'),
      file: path.relative(SRC, file),
    }));
  });
}

describe('process-warning codes', () => {
  const events = reportedEvents();

  it('finds the events it checks (the connection, LISTEN, storage, refusal, ack-write and dropped-events ones)', () => {
    expect(events.length).toBeGreaterThanOrEqual(7);
  });

  it('every warn and error event in src/ has a code of its own', () => {
    const coded = events.map(({ level, text, file }) => ({ file, text, code: warningCode(level, text) }));
    for (const { code, file, text } of coded) {
      expect({ file, text, code }).toEqual({ file, text, code: expect.not.stringMatching(/^NMN_(WARNING|ERROR)$/) });
    }
    const textsByCode = new Map();
    for (const { code, text } of coded) textsByCode.set(code, [...(textsByCode.get(code) ?? []), text]);
    for (const [code, texts] of textsByCode) expect([code, texts]).toEqual([code, [texts[0]]]);
  });

  it('an event it does not know gets the generic code of its level', () => {
    expect(warningCode('warn', 'Something new.')).toBe('NMN_WARNING');
    expect(warningCode('error', 'Something new.')).toBe('NMN_ERROR');
  });
});
