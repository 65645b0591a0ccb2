#!/usr/bin/env python3
"""Writes the README's tour to a .cpp file: every ```cpp block between the markers
<!-- tour:begin --> and <!-- tour:end -->, in order. The test built from it keeps the README
true. Usage: extract.py README.md OUTPUT.cpp"""
import re
import sys
from pathlib import Path

readme = Path(sys.argv[1]).read_text()
match = re.search(r"<!-- tour:begin -->(.*?)<!-- tour:end -->", readme, re.S)
if not match:
    sys.exit("README.md has no <!-- tour:begin --> ... <!-- tour:end --> section")
blocks = re.findall(r"```cpp\n(.*?)```", match.group(1), re.S)
if not blocks:
    sys.exit("the README's tour holds no ```cpp block")
text = "// Extracted from README.md by tests/readme/extract.py: edit the README, not this file.\n" + "\n".join(blocks)
output = Path(sys.argv[2])
if not output.exists() or output.read_text() != text:
    output.write_text(text)
