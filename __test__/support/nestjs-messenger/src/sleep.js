'use strict';

/**
 * Resolves after `ms` milliseconds on a timer that does not keep the process alive.
 * @param {number} ms
 * @returns {Promise<void>}
 */
function sleep(ms) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (typeof timer.unref === 'function') {
      timer.unref();
    }
  });
}

module.exports = { sleep };
