'use strict';

// The generated loader picks the .node for this platform; everything native goes through here.
module.exports = require('../binding.js');
