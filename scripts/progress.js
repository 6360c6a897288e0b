'use strict';

/**
 * Progress output for the demo and the benchmark: on a terminal, one bar redrawn in place (log
 * lines written through `log()` go above it); elsewhere (CI, a pipe, a file) a plain line every
 * 10% and the log lines as they come, so logs stay readable.
 */
class Progress {
  #total;
  #tty;
  #lastDecile = -1;
  #drawn = '';
  #drawnAt = 0;

  /**
   * @param {number} total the count that is 100%
   * @param {NodeJS.WriteStream} [stream] where to draw (stdout by default)
   */
  constructor(total, stream = process.stdout) {
    this.#total = Math.max(1, total);
    this.#tty = Boolean(stream.isTTY);
    this.stream = stream;
  }

  /**
   * @param {number} done how much of the total is done
   * @param {string} detail what the line says after the percentage
   */
  update(done, detail) {
    const ratio = Math.min(1, done / this.#total);
    const percent = String(Math.round(ratio * 100)).padStart(3);
    if (this.#tty) {
      // A redraw per message would cost the demo more than its messages: at most every 50 ms.
      const now = Date.now();
      if (ratio < 1 && now - this.#drawnAt < 50) return;
      this.#drawnAt = now;
      const width = 30;
      const filled = Math.round(ratio * width);
      const bar = `${'█'.repeat(filled)}${'░'.repeat(width - filled)}`;
      this.#drawn = `  ${bar} ${percent}%  ${detail}`;
      const columns = this.stream.columns || 120;
      this.stream.write(`\r\x1b[2K${this.#drawn.slice(0, columns - 1)}`);
      return;
    }
    const decile = Math.floor(ratio * 10);
    if (decile > this.#lastDecile) {
      this.#lastDecile = decile;
      this.stream.write(`  ${decile * 10}%: ${detail}\n`);
    }
  }

  /** A log line that must not be overwritten by the bar: above the bar on a terminal. */
  log(line) {
    if (!this.#tty) {
      this.stream.write(`${line}\n`);
      return;
    }
    const columns = this.stream.columns || 120;
    this.stream.write(`\r\x1b[2K${line}\n${this.#drawn.slice(0, columns - 1)}`);
  }

  /** Ends the bar's line on a terminal. */
  end() {
    if (this.#tty && this.#drawn) this.stream.write('\n');
    this.#drawn = '';
  }
}

module.exports = { Progress };
