#!/usr/bin/env python3
"""The layout document (docs/layout.md) against include/versatil/libtorch/: fails when a header sits
in a folder (or libtorch/ itself) the document's table does not name, when a folder it names holds
no header, when a folder holds more than 20 headers, or when folders include each other in a cycle
(a model's path through the rooms would then come back). Usage: check_layout.py LAYOUT_MD INCLUDE_DIR"""
import re
import sys
from pathlib import Path

MOST_HEADERS = 20
layout, include_dir = Path(sys.argv[1]), Path(sys.argv[2])
root = include_dir / "versatil" / "libtorch"
named = set(re.findall(r"^\| `libtorch/([a-z_]+)/` \|", layout.read_text(), flags=re.MULTILINE))
named_files = set(re.findall(r"^\| `libtorch/([a-z_]+\.hpp)` \|", layout.read_text(), flags=re.MULTILINE))
headers = {}  # folder -> its headers
for header in root.rglob("*.hpp"):
    headers.setdefault(header.relative_to(root).parts[0] if header.parent != root else "", []).append(header)

problems = []
for header in headers.pop("", []):
    if header.name not in named_files:
        problems.append(f"{header.relative_to(include_dir)} sits in libtorch/ itself, "
                        "outside every folder the picture names")
for folder in sorted(set(headers) - named):
    problems.append(f"libtorch/{folder}/ holds {len(headers[folder])} header(s) but {layout.name} does not name it")
for folder in sorted(named - set(headers)):
    problems.append(f"{layout.name} names libtorch/{folder}/, which holds no header")
for folder, found in sorted(headers.items()):
    if len(found) > MOST_HEADERS:
        problems.append(f"libtorch/{folder}/ holds {len(found)} headers, more than {MOST_HEADERS}: it needs a split")

includes = {folder: set() for folder in headers}  # folder -> the other folders its headers include
for folder, found in headers.items():
    for header in found:
        for used in re.findall(r'#include "versatil/libtorch/([a-z_]+)/', header.read_text()):
            if used != folder:
                includes[folder].add(used)


def cycle_from(start):
    path, seen = [start], set()

    def walk(folder):
        for used in sorted(includes.get(folder, ())):
            if used == start:
                return path + [start]
            if used not in seen:
                seen.add(used)
                path.append(used)
                if found := walk(used):
                    return found
                path.pop()
        return None

    return walk(start)


for folder in sorted(includes):
    if cycle := cycle_from(folder):
        problems.append("folders include each other in a cycle: " + " -> ".join(cycle))
        break

for problem in problems:
    print("layout:", problem)
if not problems:
    print(f"layout: {len(headers)} folders, each named in {layout.name}, none over {MOST_HEADERS} headers, no cycle")
sys.exit(1 if problems else 0)
