// Hand-written declarations for @schally/nestjs-messenger/testing.
// The suite relies on Jest globals (describe/it/beforeEach/afterEach/expect).

import type { TransportInterface } from './index.js';

export interface ConformanceCapabilities {
  /** Run the DelayStamp scenario. */
  readonly delayedDelivery: boolean;
  /** Reserved, unused. */
  readonly messageCount?: boolean;
  /** Run the list()/find() scenarios. */
  readonly listable?: boolean;
}

export interface ConformanceHarness {
  readonly transport: TransportInterface;
  readonly cleanup: () => Promise<void>;
}

export interface TransportConformanceOptions {
  readonly name: string;
  /** Called before every scenario: a fresh transport per scenario. */
  createTransport(): Promise<ConformanceHarness>;
  readonly capabilities: ConformanceCapabilities;
}

/** Message used by the suite; register it with a serializing transport's serializer. */
export declare class ConformanceMessage {
  readonly id: string;
  readonly payload: string;
  constructor(id: string, payload?: string);
}

/** Registers the conformance scenarios in `describe("<name> (transport conformance)")`. */
export declare function runTransportConformanceTests(options: TransportConformanceOptions): void;
