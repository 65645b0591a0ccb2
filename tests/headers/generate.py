#!/usr/bin/env python3
"""Writes one translation unit per public header, each including only that header twice
(proving it is self-contained and guarded). Usage: generate.py INCLUDE_DIR OUTPUT_DIR PREFIX...
Each PREFIX, relative to INCLUDE_DIR/versatil, is a directory ("core/") or one header
("versatil.hpp"); the headers under them are covered. The names of the generated files are
printed, one a line."""
import sys
from pathlib import Path

include_dir, output_dir = Path(sys.argv[1]), Path(sys.argv[2])
prefixes = sys.argv[3:]
root = include_dir / "versatil"
headers = sorted(h for h in root.rglob("*.hpp") if any(h.relative_to(root).as_posix().startswith(p) for p in prefixes))
output_dir.mkdir(parents=True, exist_ok=True)
for header in headers:
    relative = header.relative_to(include_dir).as_posix()
    name = "header_" + relative.replace("/", "_").replace(".hpp", ".cpp")
    text = f'#include "{relative}"\n#include "{relative}"  // twice: the guard must hold\n'
    target = output_dir / name
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    print(target)
