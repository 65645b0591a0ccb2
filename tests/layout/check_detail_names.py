#!/usr/bin/env python3
"""Names in the LibTorch layer's `detail` namespaces, each header's helpers side by side in one
namespace: fails when two headers declare the same name in the same detail namespace (one inline
function in two headers with one signature is an ODR violation the compiler never sees unless a
translation unit includes both; with two signatures, a call may quietly pick the other), or when a
detail name is also declared in the namespace around it (an unqualified call inside detail then
finds the detail one first). Overloads within one header are deliberate and pass.
Usage: check_detail_names.py INCLUDE_DIR"""
import collections
import re
import sys
from pathlib import Path

root = Path(sys.argv[1]) / "versatil" / "libtorch"
DECLARATION = re.compile(r"^(?:template|inline|constexpr|struct|class|enum|using)\b")
TYPE_NAME = re.compile(r"^(?:struct|class|enum class|enum|using)\s+(\w+)")
CALLED_NAME = re.compile(r"(?<![:\w])(\w+)\s*\(")  # the first name before "(" not qualified by "::"
RAW_STRING_DELIMITERS = {"JIT"}

declared = collections.defaultdict(set)  # (namespace, name) -> headers
for header in sorted(root.rglob("*.hpp")):
    namespaces = []
    for line in header.read_text().splitlines():
        if opened := re.match(r"^namespace ([\w:]+) \{", line):
            namespaces.append(opened.group(1))
        elif re.match(r"^\}\s*//\s*namespace", line):
            namespaces = namespaces[:-1]
        elif namespaces and DECLARATION.match(line):
            found = TYPE_NAME.match(line) or CALLED_NAME.search(line)
            if found and found.group(1) not in RAW_STRING_DELIMITERS:
                declared[("::".join(namespaces), found.group(1))].add(header.relative_to(root).as_posix())

problems = []
for (namespace, name), headers in sorted(declared.items()):
    if not namespace.endswith("detail"):
        continue
    if len(headers) > 1:
        problems.append(f"{namespace}::{name} is declared in {len(headers)} headers: {', '.join(sorted(headers))}")
    around = namespace.rsplit("::", 1)[0] if "::" in namespace else ""
    if (around, name) in declared and (around, name) != (namespace, name):
        outer = declared[(around, name)] - headers
        if outer:
            problems.append(f"{namespace}::{name} ({', '.join(sorted(headers))}) shadows {around}::{name} "
                            f"({', '.join(sorted(outer))})")

for problem in problems:
    print("detail names:", problem)
if not problems:
    print(f"detail names: {sum(1 for key in declared if key[0].endswith('detail'))} names, each in one header")
sys.exit(1 if problems else 0)
