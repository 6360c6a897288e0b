'use strict';

// An app process that writes a SQLite file with better-sqlite3, driven over IPC by a test.
// Separate from the test's process on purpose: better-sqlite3 and this addon each link their
// own copy of SQLite, and two copies in one process release each other's POSIX locks on the
// same file (SQLite's "How To Corrupt", 2.2.1); in one process that showed as "disk I/O error".
//
// Messages: { seq, op: 'exec', sql } | { seq, op: 'run', text, values } | { seq, op: 'close' };
// replies { seq, result } or { seq, error }.

const Database = require('better-sqlite3');

const db = new Database(process.argv[2]);
db.pragma('busy_timeout = 5000');

process.on('message', ({ seq, op, sql, text, values }) => {
  try {
    let result;
    if (op === 'exec') db.exec(sql);
    else if (op === 'run') result = String(db.prepare(text).run(...values).lastInsertRowid);
    else if (op === 'close') db.close();
    process.send({ seq, result }, () => {
      if (op === 'close') process.disconnect();
    });
  } catch (error) {
    process.send({ seq, error: error.message });
  }
});
