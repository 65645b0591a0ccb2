#!/usr/bin/env python3
"""Every relative link in README.md and docs/*.md points at a file or folder that exists, and a link
to a heading (`file.md#heading`, `#heading`) at a heading that exists, so moving or renaming a document
cannot leave the guide pointing nowhere. Usage: check_links.py SOURCE_ROOT"""
import re
import sys
from pathlib import Path

LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(markdown):
    """The anchors GitHub gives a document's headings: lower case, punctuation dropped, spaces as '-'."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", FENCE.sub("", markdown), re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def broken_links(root):
    documents = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    for document in documents:
        text = document.read_text()
        for target in LINK.findall(FENCE.sub("", text)):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto: are not this test's business
                continue
            path, _, anchor = target.partition("#")
            linked = (document.parent / path).resolve() if path else document
            if not linked.exists():
                yield f"{document.relative_to(root)}: '{target}': no file {linked}"
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
                yield f"{document.relative_to(root)}: '{target}': {linked.name} has no heading '#{anchor}'"


def main():
    root = Path(sys.argv[1])
    broken = list(broken_links(root))
    for line in broken:
        print("FAILED:", line)
    if broken:
        sys.exit(1)
    print("every relative link in README.md and docs/*.md resolves")


main()
