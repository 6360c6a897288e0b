'use strict';

const { runTransportConformanceTests } = require('./src/testing/conformance');
const { ConformanceMessage } = require('./src/testing/conformance-message');

module.exports = { runTransportConformanceTests, ConformanceMessage };
