'use strict';

// Runs before `npm test` (npm's `pretest`): brings up what the tests need beyond the npm
// packages. Commands the tests run (servers they start privately, the CLIs they inspect with)
// are installed from Debian's packages when this runs as root with apt-get; the shared servers
// (PostgreSQL on 5432, MariaDB on 3306, Redis on 6379) are started when they are down. Whatever
// cannot be brought up stops the test run at once, with one message saying what to install or
// start, and how. `--check` only reports, installing and starting nothing.

const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

/** Commands the tests run, and the Debian package of each. */
const COMMANDS = [
  { command: 'sqlite3', package: 'sqlite3', why: 'the SQLite tests read rows as another process would' },
  { command: 'pgbouncer', package: 'pgbouncer', why: 'the PgBouncer tests start their own' },
  { command: 'ss', package: 'iproute2', why: 'the socket tests read socket options from outside' },
  { command: 'openssl', package: 'openssl', why: 'the TLS tests make their own CA and certificates' },
  { command: 'redis-server', package: 'redis-server', why: 'the Redis fault and TLS tests start private servers' },
  { command: 'redis-cli', package: 'redis-tools', why: 'the Redis cluster tests join their nodes' },
  { command: 'mariadb-install-db', package: 'mariadb-server', why: 'the MariaDB fault tests start a private server' },
];

/** The shared servers, where the tests expect them, and how to start each (as root). */
const SERVERS = [
  {
    name: 'PostgreSQL',
    port: 5432,
    package: 'postgresql',
    start: () => {
      const versions = fs.existsSync('/etc/postgresql') ? fs.readdirSync('/etc/postgresql').sort() : [];
      return ['pg_ctlcluster', ['--skip-systemctl-redirect', versions.pop() ?? '<version>', 'main', 'start']];
    },
  },
  {
    name: 'MariaDB',
    port: 3306,
    package: 'mariadb-server',
    start: () => ['start-stop-daemon', ['--start', '--oknodo', '--background', '--exec', '/usr/sbin/mariadbd']],
  },
  {
    name: 'Redis',
    port: 6379,
    package: 'redis-server',
    start: () => [
      'redis-server',
      ['--daemonize', 'yes', '--bind', '127.0.0.1', '-::1', '--port', '6379', '--save', '', '--appendonly', 'no', '--dir', '/var/lib/redis', '--logfile', '/var/log/redis/ci.log'],
    ],
  },
];

/** Directories Debian puts server commands in, beside PATH. */
const EXTRA_DIRS = ['/usr/sbin', '/sbin', ...postgresBinDirs()];

function postgresBinDirs() {
  const root = '/usr/lib/postgresql';
  if (!fs.existsSync(root)) return [];
  return fs.readdirSync(root).map((version) => path.join(root, version, 'bin'));
}

function hasCommand(command) {
  const dirs = [...(process.env.PATH ?? '').split(path.delimiter), ...EXTRA_DIRS];
  return dirs.some((dir) => dir !== '' && fs.existsSync(path.join(dir, command)));
}

const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
const canApt = isRoot && hasCommand('apt-get');

function run(command, args) {
  const result = spawnSync(command, args, { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
  return result.status === 0;
}

function aptInstall(packages) {
  console.log(`prepare-tests: installing ${packages.join(', ')} (apt-get)`);
  return run('apt-get', ['update', '-qq']) && run('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...packages]);
}

function portOpen(port) {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    socket.setTimeout(1000);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(false));
  });
}

async function waitForPort(port, ms) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await portOpen(port)) return true;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  return false;
}

async function main() {
  const checkOnly = process.argv.includes('--check');
  const problems = [];

  const missing = COMMANDS.filter(({ command }) => !hasCommand(command));
  const serversDown = [];
  for (const server of SERVERS) if (!(await portOpen(server.port))) serversDown.push(server);
  const packages = [
    ...new Set([
      ...missing.map((m) => m.package),
      ...serversDown.filter((s) => !hasCommand(s.start()[0]) && s.package).map((s) => s.package),
    ]),
  ];
  if (packages.length > 0) {
    if (!checkOnly && canApt && aptInstall(packages)) {
      // Installed: checked again below.
    } else {
      problems.push(
        `install: apt-get install -y ${packages.join(' ')}   (${missing.map((m) => `${m.command}: ${m.why}`).join('; ') || 'the servers below'})`,
      );
    }
  }
  for (const { command, package: pkg } of COMMANDS) {
    if (!hasCommand(command) && !problems.some((p) => p.includes(pkg))) problems.push(`install: apt-get install -y ${pkg}   (${command} is missing)`);
  }

  for (const server of serversDown) {
    if (await portOpen(server.port)) continue; // an install may have started it
    const [command, args] = server.start();
    if (!checkOnly && isRoot && hasCommand(command)) {
      console.log(`prepare-tests: starting ${server.name}`);
      run(command, args);
      if (await waitForPort(server.port, 30_000)) continue;
    }
    problems.push(`start ${server.name} on 127.0.0.1:${server.port}: ${command} ${args.join(' ')}`);
  }

  if (problems.length > 0) {
    console.error(
      [
        'The tests need what this machine does not have or run. As root, `npm test` installs and starts it by itself; otherwise:',
        ...problems.map((p) => `  - ${p}`),
      ].join('\n'),
    );
    process.exitCode = 1;
    return;
  }
  console.log('prepare-tests: every command and server the tests need is here.');
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
