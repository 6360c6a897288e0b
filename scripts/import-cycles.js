'use strict';

// Lists the import cycles between the files of src/: every `crate::`, `super::` and `self::`
// path a file names (in `use` lines and inline) is resolved to the file that defines it, and
// the strongly connected components of that graph with more than one file are the cycles.
// `mod` declarations are not edges: a parent owns its children, it does not import them.
// The same is done between the layers (src/'s top-level folders): a file's edges to another
// folder are that folder's edges. Exits 1 when there is a cycle, printing each; `--json`
// prints the cycles as JSON.

const fs = require('node:fs');
const path = require('node:path');

const SRC = path.join(__dirname, '..', 'src');

/** Every .rs file under `root`, as its module path (['sql', 'dialect']) and file path. */
function moduleFiles(root, dir = root, prefix = []) {
  const files = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      files.push(...moduleFiles(root, full, [...prefix, entry.name]));
    } else if (entry.name.endsWith('.rs')) {
      const stem = entry.name.slice(0, -3);
      const modulePath = stem === 'mod' || (prefix.length === 0 && stem === 'lib') ? prefix : [...prefix, stem];
      files.push({ modulePath, file: path.relative(root, full) });
    }
  }
  return files;
}

/** The text of a file without comments and string literals (their words are not imports). */
function code(text) {
  return text
    .replace(/\/\*[\s\S]*?\*\//g, '')
    .replace(/\/\/[^\n]*/g, '')
    .replace(/r#*"[\s\S]*?"#*/g, '""')
    .replace(/"(?:[^"\\]|\\.)*"/g, '""');
}

/** `use a::{b, c::{d, e}}` expanded to the full paths it names. */
function expandUse(tree) {
  const brace = tree.indexOf('{');
  if (brace === -1) return [tree.split(' as ')[0].trim()];
  const head = tree.slice(0, brace);
  const body = tree.slice(brace + 1, tree.lastIndexOf('}'));
  const parts = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < body.length; i += 1) {
    if (body[i] === '{') depth += 1;
    else if (body[i] === '}') depth -= 1;
    else if (body[i] === ',' && depth === 0) {
      parts.push(body.slice(start, i));
      start = i + 1;
    }
  }
  parts.push(body.slice(start));
  return parts.map((p) => p.trim()).filter(Boolean).flatMap((p) => expandUse(head + p));
}

/** The module paths a file refers to, absolute (['sql', 'dialect', 'SqlDialect']). */
/** The inline modules of a file (`mod tests { … }`): name and the span of their braces. */
function inlineModules(source) {
  const modules = [];
  for (const match of source.matchAll(/\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{/g)) {
    const open = match.index + match[0].length - 1;
    let depth = 0;
    let close = source.length;
    for (let i = open; i < source.length; i += 1) {
      if (source[i] === '{') depth += 1;
      else if (source[i] === '}' && --depth === 0) {
        close = i;
        break;
      }
    }
    modules.push({ name: match[1], open, close });
  }
  return modules;
}

function referencedPaths(text, filePath) {
  const source = code(text);
  const inline = inlineModules(source);
  // The module a path is written in: the file's, plus the inline modules around it.
  const moduleAt = (offset) => [
    ...filePath,
    ...inline.filter((m) => m.open < offset && offset < m.close).map((m) => m.name),
  ];
  const paths = [];
  for (const match of source.matchAll(/\buse\s+([^;]+);/g)) {
    const at = moduleAt(match.index);
    paths.push(...expandUse(match[1].replace(/\s+/g, ' ')).map((p) => [p, at]));
  }
  for (const match of source.matchAll(/\b(?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+/g)) {
    paths.push([match[0], moduleAt(match.index)]);
  }
  // `self::` is the module a path is written in; `super::` climbs one module per use.
  return paths.flatMap(([p, modulePath]) => {
    let segments = p.split('::').map((s) => s.trim()).filter((s) => s !== '' && s !== '*');
    if (segments[0] === 'crate') return [segments.slice(1)];
    if (segments[0] === 'self') return [[...modulePath, ...segments.slice(1)]];
    if (segments[0] !== 'super') return [];
    let base = modulePath;
    while (segments[0] === 'super') {
      base = base.slice(0, -1);
      segments = segments.slice(1);
    }
    return [[...base, ...segments]];
  });
}

/** The import graph of the crate rooted at `src`: file → set of files it refers to (itself excluded). */
function importGraph(src = SRC) {
  const files = moduleFiles(src);
  const byModule = new Map(files.map((f) => [f.modulePath.join('::'), f.file]));
  const graph = new Map();
  for (const { modulePath, file } of files) {
    const text = fs.readFileSync(path.join(src, file), 'utf8');
    const targets = new Set();
    for (const referenced of referencedPaths(text, modulePath)) {
      // The longest prefix that is a module names the file that defines the item.
      for (let n = referenced.length; n >= 0; n -= 1) {
        const target = byModule.get(referenced.slice(0, n).join('::'));
        if (target !== undefined) {
          if (target !== file) targets.add(target);
          break;
        }
      }
    }
    graph.set(file, targets);
  }
  return graph;
}

/** Strongly connected components with more than one file (Tarjan). */
function cycles(graph) {
  let index = 0;
  const indexes = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const found = [];
  const visit = (node) => {
    indexes.set(node, index);
    low.set(node, index);
    index += 1;
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!indexes.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node), low.get(next)));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node), indexes.get(next)));
      }
    }
    if (low.get(node) === indexes.get(node)) {
      const component = [];
      let member;
      do {
        member = stack.pop();
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      if (component.length > 1) found.push(component.sort());
    }
  };
  for (const node of [...graph.keys()].sort()) if (!indexes.has(node)) visit(node);
  return found;
}

/** The graph between layers: a file's edges to a file of another top-level folder. */
function layerGraph(graph) {
  const layerOf = (file) => file.split(path.sep)[0];
  const layers = new Map();
  for (const [file, targets] of graph) {
    const from = layerOf(file);
    if (!layers.has(from)) layers.set(from, new Set());
    for (const target of targets) {
      if (layerOf(target) !== from) layers.get(from).add(layerOf(target));
    }
  }
  return layers;
}

function print(kind, graph, found) {
  for (const component of found) {
    process.stdout.write(`Cycle of ${component.length} ${kind}:\n`);
    for (const node of component) {
      const inside = [...graph.get(node)].filter((n) => component.includes(n));
      process.stdout.write(`  ${node} → ${inside.join(', ')}\n`);
    }
  }
}

function main() {
  const graph = importGraph();
  const layers = layerGraph(graph);
  const found = { files: cycles(graph), layers: cycles(layers) };
  if (process.argv.includes('--json')) {
    process.stdout.write(`${JSON.stringify(found, null, 2)}\n`);
  } else if (found.files.length === 0 && found.layers.length === 0) {
    process.stdout.write(`No import cycle between the ${graph.size} files of src/, nor between its ${layers.size} layers.\n`);
  } else {
    print('files', graph, found.files);
    print('layers', layers, found.layers);
  }
  process.exitCode = found.files.length === 0 && found.layers.length === 0 ? 0 : 1;
}

if (require.main === module) main();

module.exports = { importGraph, layerGraph, cycles };
