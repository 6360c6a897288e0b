'use strict';

// A registry of a few packed packages, on a free loopback port, speaking the part of the npm
// registry protocol that `npm install` uses: a package's document (its versions with their
// manifests and `dist`) at /<name>, its tarball at /-/<filename>, 404 for anything else. It
// records every request (`GET /path`, and `404 /path` after each one it did not know), so a
// check can say which tarballs npm fetched.

const fs = require('node:fs');
const http = require('node:http');

/**
 * @typedef {{ manifest: object, file: string, filename: string, integrity: string, shasum: string }} Published
 *   a packed package: the manifest it was packed with and what `npm pack --json` said of it
 */

/**
 * Serves `packages` until `close()`.
 * @param {Published[]} packages
 * @returns {Promise<{ url: string, requests: string[], close: () => Promise<void> }>}
 */
async function startRegistry(packages) {
  const requests = [];
  const tarballs = new Map(packages.map((p) => [`/-/${p.filename}`, p.file]));
  /** This registry's address, once it listens. */
  const urlOf = () => `http://127.0.0.1:${server.address().port}`;
  /** The registry's document of one package name: every version given for it. */
  const documentOf = (name) => {
    const versions = packages.filter((p) => p.manifest.name === name);
    if (versions.length === 0) return undefined;
    return {
      name,
      'dist-tags': { latest: versions[versions.length - 1].manifest.version },
      versions: Object.fromEntries(
        versions.map((p) => [
          p.manifest.version,
          {
            ...p.manifest,
            _id: `${name}@${p.manifest.version}`,
            dist: { tarball: `${urlOf()}/-/${p.filename}`, integrity: p.integrity, shasum: p.shasum },
          },
        ]),
      ),
    };
  };
  const server = http.createServer((req, res) => {
    const pathname = decodeURIComponent(new URL(req.url, 'http://registry').pathname);
    requests.push(`${req.method} ${pathname}`);
    const tarball = req.method === 'GET' ? tarballs.get(pathname) : undefined;
    if (tarball) {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      fs.createReadStream(tarball).pipe(res);
      return;
    }
    const document = req.method === 'GET' ? documentOf(pathname.slice(1)) : undefined;
    if (document) {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(document));
      return;
    }
    requests.push(`404 ${pathname}`);
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: 'not found' }));
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  return {
    url: urlOf(),
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

module.exports = { startRegistry };
