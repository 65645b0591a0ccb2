#!/usr/bin/env python3
"""The project's width (120 columns) in the folders brought to it: fails on any C++ or Python
line longer, naming each with its length, so that none comes back. Folders not yet brought to it
are not listed here. Usage: check_line_width.py SOURCE_ROOT FOLDER..."""
import sys
from pathlib import Path

WIDTH = 120
root = Path(sys.argv[1])
long_lines = []
for folder in sys.argv[2:]:
    for path in sorted((root / folder).rglob("*")):
        if path.suffix not in {".hpp", ".cpp", ".h", ".py"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if len(line) > WIDTH:
                long_lines.append(f"{path.relative_to(root)}:{number}: {len(line)} columns")
for line in long_lines:
    print("line width:", line)
if not long_lines:
    print(f"line width: every line of {', '.join(sys.argv[2:])} within {WIDTH} columns")
sys.exit(1 if long_lines else 0)
