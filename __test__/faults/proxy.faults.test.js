'use strict';

// The fault proxy itself (support/proxy.js), against a tiny echo server: forwarding, cut,
// blackhole and restore, cutAfter (the write reaches the server, its reply never the client) and
// holdBack (one connection's write reaches the server late).

const net = require('node:net');
const { startProxy } = require('./support/proxy');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

let echo;
let received;
let proxy;
const clients = [];

beforeAll(async () => {
  received = [];
  echo = net.createServer((socket) => {
    socket.on('data', (chunk) => {
      received.push(chunk.toString());
      socket.write(chunk);
    });
    socket.on('error', () => {});
  });
  await new Promise((resolve) => echo.listen(0, '127.0.0.1', resolve));
});

afterAll(async () => {
  await new Promise((resolve) => echo.close(resolve));
});

beforeEach(async () => {
  received.length = 0;
  proxy = await startProxy({ targetPort: echo.address().port });
});

afterEach(async () => {
  for (const c of clients.splice(0)) c.socket.destroy();
  await proxy.close();
});

/** A client of the proxy that records what comes back and how it ended. */
async function connect() {
  const socket = net.connect({ host: '127.0.0.1', port: proxy.port });
  const client = { socket, data: '', error: undefined, closed: false };
  socket.on('data', (chunk) => {
    client.data += chunk;
  });
  socket.on('error', (error) => {
    client.error = error;
  });
  socket.on('close', () => {
    client.closed = true;
  });
  await new Promise((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  clients.push(client);
  return client;
}

async function until(probe, timeoutMs = 2000) {
  const deadline = Date.now() + timeoutMs;
  while (!probe() && Date.now() < deadline) await sleep(5);
  return probe();
}

it('forwards both ways', async () => {
  const client = await connect();
  client.socket.write('hello');
  expect(await until(() => client.data === 'hello')).toBe(true);
  expect(proxy.connections).toBe(1);
});

it('cut() resets live connections; new connections work', async () => {
  const client = await connect();
  client.socket.write('one');
  await until(() => client.data === 'one');
  expect(proxy.cut()).toBe(1);
  expect(await until(() => client.closed)).toBe(true);
  expect(client.error?.code).toBe('ECONNRESET');
  const again = await connect();
  again.socket.write('two');
  expect(await until(() => again.data === 'two')).toBe(true);
});

it('blackhole() forwards nothing and keeps sockets open; restore() delivers what was held', async () => {
  const client = await connect();
  proxy.blackhole();
  client.socket.write('held');
  const late = await connect(); // accepted during the blackhole
  late.socket.write('late');
  await sleep(300);
  expect(client.data).toBe('');
  expect(late.data).toBe('');
  expect(received).toEqual([]);
  expect(client.closed || late.closed).toBe(false);
  proxy.restore();
  expect(await until(() => client.data === 'held' && late.data === 'late')).toBe(true);
  client.socket.write('+more');
  expect(await until(() => client.data === 'held+more')).toBe(true);
});

it('cutAfter() lets the matching write reach the server and resets the client before the reply', async () => {
  const client = await connect();
  const cut = proxy.cutAfter('INSERT');
  client.socket.write('SELECT');
  expect(await until(() => client.data === 'SELECT')).toBe(true);
  client.socket.write('INSERT 1');
  const { replied } = await cut;
  expect(replied).toBe(true);
  expect(received).toContain('INSERT 1');
  expect(await until(() => client.closed)).toBe(true);
  expect(client.data).toBe('SELECT');
  expect(client.error?.code).toBe('ECONNRESET');
});

it('holdBack() delays the matching write and what follows it on that connection only', async () => {
  const slow = await connect();
  const other = await connect();
  const caught = proxy.holdBack('BLOCK', 200);
  slow.socket.write('BLOCK 1');
  await caught;
  await sleep(20);
  slow.socket.write('+after');
  other.socket.write('other');
  expect(await until(() => other.data === 'other')).toBe(true);
  expect(received).not.toContain('BLOCK 1');
  expect(await until(() => slow.data === 'BLOCK 1+after')).toBe(true);
  const arrived = received.join('');
  expect(arrived.indexOf('other')).toBeLessThan(arrived.indexOf('BLOCK 1+after'));
});
