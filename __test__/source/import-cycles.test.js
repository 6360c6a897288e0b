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

/** Small crates, and the cycles the check must find in them: between files, and between layers. */
const CASES = [
  {
    name: 'two files that import each other, through crate:: and super:: paths',
    files: {
      'lib.rs': 'mod a;\nmod b;\n',
      'a.rs': 'use crate::b::Thing;\npub struct Other;\n',
      'b.rs': 'pub struct Thing;\nfn f() -> super::a::Other { todo!() }\n',
    },
    fileCycles: [['a.rs', 'b.rs']],
    // Files at the top of src/ are layers of their own.
    layerCycles: [['a.rs', 'b.rs']],
  },
  {
    // mod.rs → x.rs, y.rs; `super::*` in x.rs's tests is x.rs itself, not mod.rs.
    name: 'use lists, and super:: inside an inline module (no cycle)',
    files: {
      'lib.rs': 'mod q;\n',
      'q/mod.rs': 'mod x;\nmod y;\nuse self::{x::X, y::Y};\n',
      'q/x.rs': 'pub struct X;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n',
      'q/y.rs': 'pub struct Y;\n',
    },
    fileCycles: [],
    layerCycles: [],
  },
  {
    name: 'a child that imports its parent, which imports it',
    files: {
      'lib.rs': 'mod q;\n',
      'q/mod.rs': 'mod x;\nuse self::x::X;\npub struct Top;\n',
      'q/x.rs': 'pub struct X;\nuse super::Top;\n',
    },
    fileCycles: [['q/mod.rs', 'q/x.rs']],
    layerCycles: [],
  },
  {
    name: 'layers that import each other while no two files do',
    files: {
      'lib.rs': 'mod low;\nmod high;\n',
      'low/mod.rs': 'mod a;\nmod b;\n',
      'low/a.rs': 'use crate::high::c::C;\npub struct A;\n',
      'low/b.rs': 'pub struct B;\n',
      'high/mod.rs': 'pub mod c;\nmod d;\n',
      'high/c.rs': 'pub struct C;\n',
      'high/d.rs': 'use crate::low::b::B;\n',
    },
    fileCycles: [],
    layerCycles: [['high', 'low']],
  },
];

describe('the import-cycle check', () => {
  test.each(CASES)('finds $name', ({ files, fileCycles, layerCycles }) => {
    const graph = importGraph(crate(files));
    expect(cycles(graph)).toEqual(fileCycles);
    expect(cycles(layerGraph(graph))).toEqual(layerCycles);
  });

  test('src/ has no cycle between files or between layers', () => {
    const graph = importGraph();
    expect(cycles(graph)).toEqual([]);
    expect(cycles(layerGraph(graph))).toEqual([]);
  });
});
