'use strict';

// lib/native/: the seam to the Rust addon. It owns loading the addon (this file: the generated
// loader picks the .node for this platform, and everything native goes through here), the
// envelope a native failure crosses in and its translation into the core's error classes
// (native-error.js, errors.js), and whether the host is Node.js itself, which decides the send
// path served on the event loop's own thread (host.js). It imports nothing else from lib/.

module.exports = require('../../binding.js');
