#!/usr/bin/env python3
"""An exported header refuses to compile when it is wrong, and says where: the synthetic
model's header, edited one way at a time, must fail with the static_assert naming the layer
and the problem (and compile unedited, so the harness cannot pass on a broken compiler).

  check_header_asserts.py HEADER -- COMPILER ARGS...
"""
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def edits(text):
    """(what, edited text, the message expected)."""
    # A tensor's shape in the table that does not follow from the layer that writes it.
    table = text.index("inline constexpr fw::shape tensors[] = {")
    shape = re.compile(r"\{8, 28, 28\}").search(text, table)
    yield ("a tensor shape", text[:shape.start()] + "{8, 27, 28}" + text[shape.end():],
           r"layer 0 'features.0' \(conv2d\): its shapes do not match the model's tensors or its window")
    # A weight array one level short.
    weights = re.compile(r"(inline constexpr std::int8_t weights_2\[\] = \{\n    )(-?\d+), ").search(text)
    yield ("a weight array", text[:weights.start(2)] + text[weights.end():],
           r"layer 2 'features.3.depthwise' \(conv2d\): parameter arrays of the wrong size")
    # What a user writes for a device with 4 KiB of RAM.
    yield ("the user's memory budget", text + "\nstatic_assert(synthetic_model::model::arena_bytes <= 4 * 1024, "
           "\"the model does not fit the device\");\n", r"the model does not fit the device")


def compile_text(compiler, text):
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "model.hpp"
        path.write_text(text)
        source = Path(scratch) / "tu.cpp"
        source.write_text('#include "model.hpp"\n')
        run = subprocess.run(compiler + ["-fsyntax-only", "-fno-diagnostics-show-caret", str(source)],
                             capture_output=True, text=True)
        return run.returncode, run.stdout + run.stderr


def main():
    separator = sys.argv.index("--")
    header, compiler = Path(sys.argv[1]), sys.argv[separator + 1:]
    text = header.read_text()
    status, output = compile_text(compiler, text)
    if status != 0:
        sys.exit(f"the unedited header does not compile:\n{output}")
    failures = []
    for what, edited, pattern in edits(text):
        status, output = compile_text(compiler, edited)
        if status == 0:
            failures.append(f"{what}: compiled")
        elif not re.search(pattern, output):
            failures.append(f"{what}: failed without /{pattern}/:\n{output}")
        else:
            print(f"{what}: refused with /{pattern}/")
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
