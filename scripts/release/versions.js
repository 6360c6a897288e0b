'use strict';

// Every place that states the package's version, read as a release would find it: the npm
// manifests (main and every npm/ platform package), the lockfile's root, the crate (Cargo.toml
// and its Cargo.lock entry), the generated binding's checks of the platform package's version,
// and the newest released entry of CHANGELOG.md. A release publishes them together, so they
// must all agree.

const fs = require('node:fs');
const path = require('node:path');

/**
 * @typedef {{ where: string, version: string | undefined }} Statement where a version is stated,
 *   and what it says (undefined: the place states none)
 */

/** The `[package]` table's `version` of a Cargo.toml text. */
function cargoTomlVersion(text) {
  const table = text.split(/^\[/m).find((section) => section.startsWith('package]'));
  return table?.match(/^version\s*=\s*"([^"]+)"/m)?.[1];
}

/** The version of crate `name` in a Cargo.lock text. */
function cargoLockVersion(text, name) {
  const entry = text.split('[[package]]').find((block) => block.includes(`\nname = "${name}"\n`));
  return entry?.match(/^version = "([^"]+)"/m)?.[1];
}

/** Every version the generated binding compares a platform package's version with. */
function bindingVersions(text) {
  return [...text.matchAll(/bindingPackageVersion !== '([^']+)'/g)].map((m) => m[1]);
}

/** The newest released (not Unreleased) `## [x.y.z]` entry of a Keep a Changelog text. */
function changelogVersion(text) {
  return [...text.matchAll(/^## \[([^\]]+)\]/gm)].map((m) => m[1]).find((v) => v !== 'Unreleased');
}

/**
 * Every statement of the version under `root`.
 * @param {string} root the repository
 * @returns {Statement[]}
 */
function versionStatements(root) {
  const read = (file) => fs.readFileSync(path.join(root, file), 'utf8');
  const json = (file) => JSON.parse(read(file));
  const pkg = json('package.json');
  const lock = json('package-lock.json');
  const statements = [
    { where: 'package.json', version: pkg.version },
    { where: 'package-lock.json', version: lock.version },
    { where: 'package-lock.json packages[""]', version: lock.packages?.['']?.version },
  ];
  for (const dir of fs.readdirSync(path.join(root, 'npm')).sort()) {
    const file = path.join('npm', dir, 'package.json');
    if (fs.existsSync(path.join(root, file))) statements.push({ where: file, version: json(file).version });
  }
  const cargoToml = read('Cargo.toml');
  statements.push({ where: 'Cargo.toml', version: cargoTomlVersion(cargoToml) });
  const crate = cargoToml.match(/^name\s*=\s*"([^"]+)"/m)?.[1];
  statements.push({ where: `Cargo.lock (${crate})`, version: cargoLockVersion(read('Cargo.lock'), crate) });
  const checks = bindingVersions(read('binding.js'));
  const distinct = [...new Set(checks)];
  if (distinct.length === 0) statements.push({ where: 'binding.js', version: undefined });
  for (const version of distinct) {
    statements.push({ where: `binding.js (${checks.filter((v) => v === version).length} version checks)`, version });
  }
  statements.push({ where: 'CHANGELOG.md (newest release)', version: changelogVersion(read('CHANGELOG.md')) });
  return statements;
}

/**
 * Checks that every statement gives package.json's version.
 * @param {string} root the repository
 * @returns {{ version: string, statements: Statement[], wrong: Statement[] }}
 */
function checkVersions(root) {
  const statements = versionStatements(root);
  const { version } = statements[0];
  return { version, statements, wrong: statements.filter((s) => s.version !== version) };
}

module.exports = { checkVersions, versionStatements, cargoTomlVersion, cargoLockVersion, bindingVersions, changelogVersion };
