#!/usr/bin/env python3
"""Every case file in the compile-fail folder is in meson's case list, and every listed case
exists. Meson does not glob (by design), so a new case that nobody adds to the list would
otherwise never run. Usage: check_listed.py FOLDER LISTED_CASE..."""
import sys
from pathlib import Path

folder, listed = Path(sys.argv[1]), set(sys.argv[2:])
present = {path.name for path in folder.glob("*.cpp")}
unlisted, missing = sorted(present - listed), sorted(listed - present)
for name in unlisted:
    print(f"FAIL: {folder / name} is not in compile_fail_cases ({folder / 'meson.build'}): it never runs")
for name in missing:
    print(f"FAIL: {name} is listed in compile_fail_cases but {folder} has no such file")
if not present:
    print(f"FAIL: {folder} holds no case")
print(f"{len(present)} case files, {len(listed)} listed")
sys.exit(1 if unlisted or missing or not present else 0)
