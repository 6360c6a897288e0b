'use strict';

// A small TCP proxy for the fault tests: listens on a free loopback port and forwards every
// connection to one private server. It can
//   cut()        destroy every live connection with a TCP reset (both sides),
//   blackhole()  stop forwarding in both directions while keeping every socket open; new
//                connections are still accepted, and nothing is forwarded for them either,
//   restore()    forward again (what was held back during the blackhole is delivered then,
//                as TCP retransmission would after a partition heals),
//   cutAfter(p)  forward the next client→server chunk that matches `p`, then drop the
//                server's reply and reset the client: the write reached the server, its
//                outcome never reaches the client (an ambiguous write).
//   holdBack(p, ms)  hold the next client→server chunk that matches `p`, and what follows it
//                on its connection, for `ms` before forwarding it (a slow path for one
//                connection, while the others are not slowed),
//   count(p)     count the client→server chunks that match `p` from now on (what the client
//                sent, isolated from the server's other clients).
//
// A blackhole is made by not reading (sockets paused): the kernel buffers fill and TCP flow
// control stops the writer, as on a silent network. Keepalive probes are answered by the
// proxy's own kernel, so this proxy tests the response timeouts of the code under test, not
// its TCP keepalive (that needs a packet filter, which the tests do not assume).

const net = require('node:net');
const { performance } = require('node:perf_hooks');
const { freePort } = require('../../support/ports');

/**
 * Ends `socket` with a TCP reset, or, when its write side was already ended, plainly.
 *
 * Why not always a reset: Node's `resetAndDestroy()` on a socket whose shutdown is still pending
 * in libuv (end() called while the peer is not reading: a blackholed link) fails with EINVAL in
 * `uv_tcp_close_reset`, yet Node marks the handle as closing anyway, so it is never closed; at
 * exit, Node's environment teardown then waits for it forever, spinning a core (caught under gdb:
 * two TCPWraps left in the handle queue). That was the "process does not exit after a blackhole"
 * fault and the CI run whose jest never exited: the test's proxy, not the transports.
 */
function reset(socket) {
  if (socket.destroyed) return;
  if (socket.writableEnded) {
    socket.destroy();
    return;
  }
  try {
    socket.resetAndDestroy();
  } catch {
    socket.destroy();
  }
}

function matcherOf(pattern) {
  if (typeof pattern === 'function') return pattern;
  const needle = Buffer.isBuffer(pattern) ? pattern : Buffer.from(String(pattern));
  return (chunk) => chunk.includes(needle);
}

/**
 * Starts a proxy to `targetHost:targetPort` on a free loopback port.
 * @param {{ targetPort: number, targetHost?: string }} options
 */
async function startProxy({ targetPort, targetHost = '127.0.0.1' }) {
  /** Where new connections go (`retarget` moves it; open ones stay where they are). */
  const target = { host: targetHost, port: targetPort };
  /** @type {Set<{ client: net.Socket, upstream: net.Socket, doomed: boolean }>} */
  const links = new Set();
  let blackholed = false;
  let accepted = 0;
  /** When each connection was accepted (performance.now()), in order. */
  const acceptedAt = [];
  /** Armed cutAfter traps, first armed first served. */
  const traps = [];
  /** Armed holdBack delays, first armed first served. */
  const holds = [];
  /** Armed holdReply delays, first armed first served. */
  const replyHolds = [];
  /** Chunk counters, see count(). */
  const counters = [];

  function dropLink(link) {
    if (!links.delete(link)) return;
    reset(link.client);
    reset(link.upstream);
  }

  /**
   * In `ms`, writes the chunks gathered in `link[field]` to `socket` (if the link is still
   * up) and stops gathering them.
   */
  function passLater(link, field, socket, ms) {
    setTimeout(() => {
      const held = link[field];
      link[field] = undefined;
      if (links.has(link)) for (const c of held) socket.write(c);
    }, ms);
  }

  function onClientData(link, chunk) {
    link.lastDataAt = Date.now();
    link.bytesUp += chunk.length;
    for (const counter of counters) if (counter.matches(chunk)) counter.seen += 1;
    if (link.doomed) return;
    if (link.held !== undefined) {
      link.held.push(chunk);
      return;
    }
    const holdIndex = holds.findIndex((hold) => hold.matches(chunk));
    if (holdIndex >= 0) {
      const [hold] = holds.splice(holdIndex, 1);
      link.held = [chunk];
      hold.resolve({ at: Date.now(), chunk });
      passLater(link, 'held', link.upstream, hold.ms);
      return;
    }
    const replyHoldIndex = replyHolds.findIndex((hold) => hold.matches(chunk));
    if (replyHoldIndex >= 0) {
      const [hold] = replyHolds.splice(replyHoldIndex, 1);
      link.heldDown = [];
      passLater(link, 'heldDown', link.client, hold.ms);
      link.upstream.write(chunk);
      hold.resolve({ at: Date.now(), chunk });
      return;
    }
    const index = traps.findIndex((trap) => trap.matches(chunk));
    if (index >= 0 && traps[index].refuse) {
      // Never reaches the server: the write did not run, and the client sees a reset.
      const [trap] = traps.splice(index, 1);
      dropLink(link);
      trap.resolve({ at: Date.now(), chunk });
      return;
    }
    if (index >= 0) {
      const [trap] = traps.splice(index, 1);
      link.doomed = true;
      link.upstream.write(chunk);
      const fire = (replied) => {
        clearTimeout(timer);
        link.onDoomedReply = undefined;
        dropLink(link);
        trap.resolve({ at: Date.now(), replied, chunk });
      };
      const timer = setTimeout(() => fire(false), trap.waitForReplyMs);
      link.onDoomedReply = () => fire(true);
      return;
    }
    link.upstream.write(chunk);
  }

  function onServerData(link, chunk) {
    link.lastDataAt = Date.now();
    link.bytesDown += chunk.length;
    if (link.doomed) {
      // The server answered the doomed chunk: the reply is dropped, the client reset.
      link.onDoomedReply?.();
      return;
    }
    if (link.heldDown !== undefined) {
      link.heldDown.push(chunk);
      return;
    }
    link.client.write(chunk);
  }

  const server = net.createServer({ pauseOnConnect: true }, (client) => {
    accepted += 1;
    acceptedAt.push(performance.now());
    const upstream = net.connect({ host: target.host, port: target.port });
    const link = { client, upstream, doomed: false, onDoomedReply: undefined, held: undefined, heldDown: undefined, openedAt: Date.now(), lastDataAt: Date.now(), bytesUp: 0, bytesDown: 0 };
    links.add(link);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    client.on('data', (chunk) => onClientData(link, chunk));
    upstream.on('data', (chunk) => onServerData(link, chunk));
    // One side gone: the other goes too (a reset stays a reset, an orderly close an end).
    const closeOther = (other) => (hadError) => {
      if (!links.has(link)) return;
      if (hadError) {
        dropLink(link);
      } else {
        links.delete(link);
        other.end();
        setTimeout(() => other.destroy(), 1000).unref();
      }
    };
    client.on('close', closeOther(upstream));
    upstream.on('close', closeOther(client));
    client.on('error', () => {});
    upstream.on('error', () => {});
    if (blackholed) {
      upstream.pause();
    } else {
      client.resume();
    }
  });
  server.on('error', () => {});

  let port;
  for (let attempt = 0; ; attempt += 1) {
    port = await freePort();
    try {
      await new Promise((resolve, reject) => {
        server.once('error', reject);
        server.listen({ port, host: '127.0.0.1', exclusive: true }, () => {
          server.off('error', reject);
          resolve();
        });
      });
      break;
    } catch (error) {
      if (attempt >= 4) throw error;
    }
  }

  return {
    port,
    host: '127.0.0.1',
    /** Live proxied connections. */
    get connections() {
      return links.size;
    },
    /** What each live connection did: for a test's failure message. */
    describeLinks() {
      const now = Date.now();
      return [...links].map(
        (l) => `opened ${now - l.openedAt} ms ago, last data ${now - l.lastDataAt} ms ago, ${l.bytesUp} B up, ${l.bytesDown} B down`,
      );
    },
    /** Connections accepted since start. */
    get accepted() {
      return accepted;
    },
    /** When each connection since start was accepted (ms, performance.now()), in order. */
    get acceptedAt() {
      return [...acceptedAt];
    },
    get blackholed() {
      return blackholed;
    },
    /**
     * Sends new connections to `port` from now on, as a DNS name repointed after a failover:
     * open connections stay where they were.
     */
    retarget(port) {
      target.port = port;
    },
    /** Resets every live connection (both sides); new ones are accepted and forwarded. */
    cut() {
      const count = links.size;
      for (const link of [...links]) dropLink(link);
      return count;
    },
    /** Stops forwarding in both directions; sockets stay open, new ones are accepted. */
    blackhole() {
      blackholed = true;
      for (const { client, upstream } of links) {
        client.pause();
        upstream.pause();
      }
    },
    /** Forwards again, held-back bytes included. */
    restore() {
      blackholed = false;
      for (const { client, upstream } of links) {
        client.resume();
        upstream.resume();
      }
    },
    /**
     * Arms a trap: the next client→server chunk matching `pattern` (a string, a Buffer or a
     * predicate over the chunk) is forwarded, then the connection is reset once the server
     * replied (the reply is dropped) or after `waitForReplyMs`. Resolves `{ at, replied }`.
     * @param {string | Buffer | ((chunk: Buffer) => boolean)} pattern
     * @param {{ waitForReplyMs?: number }} [options]
     */
    cutAfter(pattern, { waitForReplyMs = 2000 } = {}) {
      return new Promise((resolve) => {
        traps.push({ matches: matcherOf(pattern), waitForReplyMs, resolve });
      });
    },
    /**
     * Arms a reply delay: the next client→server chunk matching `pattern` reaches the server at
     * once, and what the server sends back on that connection from then on reaches the client
     * `ms` later (the statement runs; its outcome is late). Resolves `{ at }` when the chunk is
     * forwarded.
     * @param {string | Buffer | ((chunk: Buffer) => boolean)} pattern
     * @param {number} ms
     */
    holdReply(pattern, ms) {
      return new Promise((resolve) => {
        replyHolds.push({ matches: matcherOf(pattern), ms, resolve });
      });
    },
    /**
     * Arms a refusal: the next client→server chunk matching `pattern` (a string, a Buffer or a
     * predicate over the chunk) is dropped and its connection reset at once, so its statement
     * never runs. Resolves `{ at }` when it was refused.
     * @param {string | Buffer | ((chunk: Buffer) => boolean)} pattern
     */
    refuseNext(pattern) {
      return new Promise((resolve) => {
        traps.push({ matches: matcherOf(pattern), refuse: true, resolve });
      });
    },
    /**
     * Arms a delay: the next client→server chunk matching `pattern`, and every chunk after it
     * on the same connection, reaches the server `ms` later. Resolves `{ at }` when the chunk
     * is caught (sent by the client, not yet at the server).
     * @param {string | Buffer | ((chunk: Buffer) => boolean)} pattern
     * @param {number} ms
     */
    holdBack(pattern, ms) {
      return new Promise((resolve) => {
        holds.push({ matches: matcherOf(pattern), ms, resolve });
      });
    },
    /**
     * Counts the client→server chunks matching `pattern` (a string, a Buffer or a predicate
     * over the chunk) from now on, over every connection; `seen` is the count so far.
     * @param {string | Buffer | ((chunk: Buffer) => boolean)} pattern
     * @returns {{ readonly seen: number }}
     */
    count(pattern) {
      const counter = { matches: matcherOf(pattern), seen: 0 };
      counters.push(counter);
      return {
        get seen() {
          return counter.seen;
        },
      };
    },
    /** Stops listening and resets every connection. */
    close() {
      for (const link of [...links]) dropLink(link);
      traps.splice(0);
      holds.splice(0);
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** `dsn` (a private server's) with its port replaced by the proxy's. */
function viaProxy(dsn, proxy) {
  const url = new URL(dsn);
  url.port = String(proxy.port);
  return url.toString();
}

/**
 * `dsn` through `proxy`, which forwards to the server itself: a PostgreSQL DSN says no pooler
 * is in between (`pgbouncer=false`), so that the transport takes no second connection on
 * first contact to look for one, and connection counts are the transport's own.
 */
function viaServerProxy(dsn, proxy) {
  const url = new URL(viaProxy(dsn, proxy));
  if (/^postgres(ql)?:$/.test(url.protocol)) url.searchParams.set('pgbouncer', 'false');
  return url.toString();
}

/** Runs `work` while sampling `proxy`'s live connections every 2 ms; resolves the peak. */
async function peakConnections(proxy, work) {
  let peak = 0;
  const sampler = setInterval(() => {
    peak = Math.max(peak, proxy.connections);
  }, 2);
  try {
    await work();
  } finally {
    clearInterval(sampler);
  }
  return Math.max(peak, proxy.connections);
}

module.exports = { startProxy, viaProxy, viaServerProxy, freePort, peakConnections };
