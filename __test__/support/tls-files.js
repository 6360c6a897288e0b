'use strict';

// Throwaway TLS material for the tests that run a server of their own over TLS (Redis,
// PostgreSQL, MariaDB): a test CA made with the openssl CLI, server certificates it signs for
// the names a test chooses, and a second, unrelated CA, all PEM files in a new temporary
// directory. Nothing here is trusted by the system: a client trusts the CA only when told to.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');

/**
 * A throwaway CA and a server certificate signed by it (for 127.0.0.1 and localhost unless
 * `subjectAltName` says otherwise), plus a second, unrelated CA.
 *
 * `issue(name, subjectAltName, usage)` signs one more certificate with the same CA (say, one
 * that names another host, or with `usage` 'clientAuth' a client certificate), so that a client
 * trusting `ca` differs only in the name it sees.
 * @param {{ subjectAltName?: string }} [options] an openssl subjectAltName value
 * @returns {{ dir: string, ca: string, otherCa: string, cert: string, key: string,
 *   issue: (name: string, subjectAltName: string, usage?: string) => { cert: string, key: string },
 *   remove: () => void }}
 */
function makeTlsFiles({ subjectAltName = 'IP:127.0.0.1,DNS:localhost' } = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nmn-tls-'));
  const file = (name) => path.join(dir, name);
  const openssl = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  for (const ca of ['ca', 'other-ca']) {
    openssl(
      'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
      '-keyout', file(`${ca}.key`), '-out', file(`${ca}.crt`), '-subj', `/CN=nmn test ${ca}`,
    );
  }
  const issue = (name, names, usage = 'serverAuth') => {
    openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', file(`${name}.key`), '-out', file(`${name}.csr`), '-subj', `/CN=nmn test ${name}`);
    fs.writeFileSync(
      file(`${name}.ext`),
      `basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=${usage}\nsubjectAltName=${names}\n`,
    );
    openssl(
      'x509', '-req', '-in', file(`${name}.csr`), '-CA', file('ca.crt'), '-CAkey', file('ca.key'),
      '-CAcreateserial', '-out', file(`${name}.crt`), '-days', '2', '-extfile', file(`${name}.ext`),
    );
    return { cert: file(`${name}.crt`), key: file(`${name}.key`) };
  };
  const server = issue('server', subjectAltName);
  return {
    dir,
    ca: file('ca.crt'),
    otherCa: file('other-ca.crt'),
    cert: server.cert,
    key: server.key,
    issue,
    remove: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}

module.exports = { makeTlsFiles };
