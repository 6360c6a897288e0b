'use strict';

// A DSN as the addon shows it in its own messages: the addon's own redaction (src/support/dsn.rs), so
// that the demo and the CLI never print a password the addon would hide.

const { redactDsn } = require('../native/addon');

module.exports = { redactDsn };
