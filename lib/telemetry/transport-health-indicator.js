'use strict';

const { invalidArgument } = require('../native/errors');

/**
 * A `@nestjs/terminus` health indicator for any of the package's transports (anything with
 * `health()`), written without importing terminus: the app's own terminus major decides how a
 * `down` must be told, and one import would pin one.
 *
 * - terminus 11 and later: pass the `HealthIndicatorService` (injected by `TerminusModule`); a
 *   `down` is returned through it, as those versions expect (12 no longer reads thrown errors).
 * - terminus 10: construct without it; a `down` is thrown as terminus 10's `HealthCheckError`
 *   is (an error with `isHealthCheckError` and `causes`), which 10 and 11 both read.
 */
class TransportHealthIndicator {
  #indicators;

  /**
   * @param {{ check(key: string): { up(data?: object): object, down(data?: object): object } }} [healthIndicatorService]
   *   terminus 11+'s `HealthIndicatorService`; omit it on terminus 10
   */
  constructor(healthIndicatorService) {
    if (healthIndicatorService !== undefined && typeof healthIndicatorService?.check !== 'function') {
      throw invalidArgument("TransportHealthIndicator takes @nestjs/terminus's HealthIndicatorService (11 and later), or nothing (10).");
    }
    this.#indicators = healthIndicatorService;
  }

  /**
   * The transport's `health()` as terminus reports an indicator: `{ [key]: { status, ...details } }`.
   * @param {string} key the name the result is reported under
   * @param {{ health(options?: { timeoutMs?: number }): Promise<import('../index').TransportHealth> }} transport
   * @param {{ timeoutMs?: number }} [options] passed to `health()`
   */
  async isHealthy(key, transport, options = {}) {
    if (typeof key !== 'string' || key === '') throw invalidArgument('The health indicator key must be a non-empty string.');
    if (typeof transport?.health !== 'function') {
      throw invalidArgument('TransportHealthIndicator checks a transport of this package (one with health()).');
    }
    const { status, details } = await transport.health(options);
    if (this.#indicators !== undefined) {
      const session = this.#indicators.check(key);
      return status === 'up' ? session.up({ ...details }) : session.down({ ...details });
    }
    const result = { [key]: { status, ...details } };
    if (status === 'up') return result;
    throw new TransportHealthCheckError(`${key} is down: ${details.error}`, result);
  }
}

/** A `down` as terminus 10 reads it: it looks for `isHealthCheckError` and takes `causes`. */
class TransportHealthCheckError extends Error {
  constructor(message, causes) {
    super(message);
    this.name = 'HealthCheckError';
    this.isHealthCheckError = true;
    this.causes = causes;
  }
}

module.exports = { TransportHealthIndicator };
