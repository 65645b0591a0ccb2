#!/usr/bin/env python3
"""Builds a translation unit for a Cortex-M4 (no exceptions, no RTTI, -Os) with nothing on
the include path but versatil and Boost.Hana: proof that the core needs neither LibTorch nor
a hosted system. Prints the object's section sizes."""
import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ["-std=c++20", "-mcpu=cortex-m4", "-mthumb", "-fno-exceptions", "-fno-rtti", "-Os",
         "-Wall", "-Wextra", "-Werror"]


def hana_root(host_compiler: str) -> Path:
    """The directory holding boost/hana, as the host compiler finds it."""
    probe = subprocess.run([host_compiler, "-std=c++20", "-x", "c++", "-M", "-"],
                           input="#include <boost/hana/version.hpp>\n", capture_output=True, text=True, check=True)
    for token in probe.stdout.replace("\\\n", " ").split():
        if token.endswith("boost/hana/version.hpp"):
            return Path(token).resolve().parent.parent.parent
    sys.exit("cannot find boost/hana/version.hpp with " + host_compiler)


def main():
    parser = argparse.ArgumentParser()
    for name in ("compiler", "host-compiler", "include", "source", "output"):
        parser.add_argument("--" + name, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        # Only boost/hana is visible: no host header can leak in through /usr/include.
        (Path(scratch) / "boost").mkdir()
        (Path(scratch) / "boost" / "hana").symlink_to(hana_root(args.host_compiler) / "boost" / "hana")
        command = [args.compiler, *FLAGS, "-I", args.include, "-I", scratch, "-c", args.source, "-o", args.output]
        print(" ".join(command))
        run = subprocess.run(command, capture_output=True, text=True)
        sys.stdout.write(run.stdout + run.stderr)
        if run.returncode != 0:
            sys.exit(run.returncode)
    size = shutil.which(Path(args.compiler).name.replace("g++", "size"))
    if size:
        subprocess.run([size, args.output], check=True)


if __name__ == "__main__":
    main()
