'use strict';

/**
 * Progress output: a redrawn bar on a terminal, a plain line every 10% otherwise (logs, CI).
 */
class Progress {
  #total;
  #tty;
  #lastDecile = -1;

  constructor(total, stream = process.stdout) {
    this.#total = total;
    this.#tty = Boolean(stream.isTTY);
    this.stream = stream;
  }

  update(done, redeliveries) {
    const ratio = Math.min(1, done / this.#total);
    if (this.#tty) {
      const width = 30;
      const filled = Math.round(ratio * width);
      const bar = `${'█'.repeat(filled)}${'░'.repeat(width - filled)}`;
      this.stream.write(`\r  ${bar} ${String(Math.round(ratio * 100)).padStart(3)}%  ${done}/${this.#total} handled, ${redeliveries} redelivered`);
      return;
    }
    const decile = Math.floor(ratio * 10);
    if (decile > this.#lastDecile) {
      this.#lastDecile = decile;
      this.stream.write(`  ${decile * 10}%: ${done}/${this.#total} handled, ${redeliveries} redelivered\n`);
    }
  }

  end() {
    if (this.#tty) this.stream.write('\n');
  }
}

module.exports = { Progress };
