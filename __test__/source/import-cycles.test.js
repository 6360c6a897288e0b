'use strict';

// src/ is cut into layers that import only downwards (CONTRIBUTING.md, "Layout"). The script
// behind `npm run check:cycles` finds a cycle between files or between layers; these cases
// show it does, on a small crate written here, and that src/ has none.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { importGraph, layerGraph, cycles } = require('../../scripts/import-cycles');

/** A crate of `files` (path → text) in a fresh temporary folder. */
function crate(files) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'cycles-'));
  for (const [file, text] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
    fs.writeFileSync(path.join(root, file), text);
  }
  return root;
}

describe('the import-cycle check', () => {
  test('finds two files that import each other, through crate:: and super:: paths', () => {
    const root = crate({
      'lib.rs': 'mod a;\nmod b;\n',
      'a.rs': 'use crate::b::Thing;\npub struct Other;\n',
      'b.rs': 'pub struct Thing;\nfn f() -> super::a::Other { todo!() }\n',
    });
    expect(cycles(importGraph(root))).toEqual([['a.rs', 'b.rs']]);
  });

  test('reads use lists, and super:: inside an inline module as that module’s parent', () => {
    const root = crate({
      'lib.rs': 'mod q;\n',
      'q/mod.rs': 'mod x;\nmod y;\nuse self::{x::X, y::Y};\n',
      'q/x.rs': 'pub struct X;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n',
      'q/y.rs': 'pub struct Y;\n',
    });
    // mod.rs → x.rs, y.rs; `super::*` in x.rs's tests is x.rs itself, not mod.rs.
    expect(cycles(importGraph(root))).toEqual([]);
    const withBackEdge = crate({
      'lib.rs': 'mod q;\n',
      'q/mod.rs': 'mod x;\nuse self::x::X;\npub struct Top;\n',
      'q/x.rs': 'pub struct X;\nuse super::Top;\n',
    });
    expect(cycles(importGraph(withBackEdge))).toEqual([['q/mod.rs', 'q/x.rs']]);
  });

  test('finds layers that import each other even when no two files do', () => {
    const root = crate({
      'lib.rs': 'mod low;\nmod high;\n',
      'low/mod.rs': 'mod a;\nmod b;\n',
      'low/a.rs': 'use crate::high::c::C;\npub struct A;\n',
      'low/b.rs': 'pub struct B;\n',
      'high/mod.rs': 'pub mod c;\nmod d;\n',
      'high/c.rs': 'pub struct C;\n',
      'high/d.rs': 'use crate::low::b::B;\n',
    });
    const graph = importGraph(root);
    expect(cycles(graph)).toEqual([]);
    expect(cycles(layerGraph(graph))).toEqual([['high', 'low']]);
  });

  test('src/ has no cycle between files or between layers', () => {
    const graph = importGraph();
    expect(cycles(graph)).toEqual([]);
    expect(cycles(layerGraph(graph))).toEqual([]);
  });
});
