#!/usr/bin/env python3
"""Uses versatil from a project outside the source tree, one way per run, as the README's "Use
it in your project" shows: the build's staged install (`meson install --destdir`) through
CMake's find_package or pkg-config, versatil as a meson subproject, or the installed headers
alone for a Cortex-M4. Builds the core translation unit (and, with --torch, the one that
quantizes a model) and runs what it built. Prints every command; any failing step fails.
Usage: check_consumer.py {cmake,pkgconfig,subproject,firmware} --source-root S --build-root B
       --meson M [--torch] [--cmake C] [--arm-compiler A --host-compiler H]"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def step(command, cwd=None, env=None, shell=False):
    """Runs one step, echoing it and its output; exits with the failure named."""
    shown = command if shell else shlex.join(map(str, command))
    print(f"$ {shown}", flush=True)
    start = time.monotonic()
    run = subprocess.run(command if shell else list(map(str, command)), cwd=cwd, env=env, shell=shell,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(run.stdout)
    if run.returncode != 0:
        sys.exit(f"FAILED (exit {run.returncode}): {shown}")
    print(f"  ({time.monotonic() - start:.1f} s)", flush=True)


def staged_install(args, scratch):
    """The build's installed files under scratch/stage; returns the staged prefix and the
    build's directory options (includedir, libdir: relative to the prefix)."""
    stage = scratch / "stage"
    step([args.meson, "install", "-C", args.build_root, "--destdir", stage, "--no-rebuild"])
    options = json.loads(subprocess.run([args.meson, "introspect", "--buildoptions", args.build_root],
                                        capture_output=True, text=True, check=True).stdout)
    options = {option["name"]: option["value"] for option in options}
    return stage / options["prefix"].lstrip("/"), options


def require_in_readme(args, text, used=None):
    """The README's "Use it in your project" shows what this test builds with (text, found in
    used where given), so they cannot drift apart."""
    if text not in (Path(args.source_root) / "README.md").read_text():
        sys.exit(f"FAILED: README.md no longer shows what this test uses:\n{text}")
    if used is not None and text not in used:
        sys.exit(f"FAILED: the consumer project does not use the README's {text.strip()!r}")


def copy_project(kind, scratch):
    """The consumer project and the shared sources, in a directory of their own."""
    project = scratch / "project"
    if (HERE / kind).is_dir():
        shutil.copytree(HERE / kind, project)
    else:
        project.mkdir()  # pkg-config: the README's command lines are the whole project
    for source in (HERE / "src").iterdir():
        shutil.copy(source, project)
    return project


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["cmake", "pkgconfig", "subproject", "firmware"])
    for name in ("source-root", "build-root", "meson"):
        parser.add_argument("--" + name, required=True)
    for name in ("cmake", "arm-compiler", "host-compiler"):
        parser.add_argument("--" + name)
    parser.add_argument("--torch", action="store_true", help="LibTorch is there: build and run its TU too")
    args = parser.parse_args()
    programs = ["core_check"] + (["quantize_model"] if args.torch else [])
    with tempfile.TemporaryDirectory(prefix=f"versatil-consumer-{args.kind}-") as scratch_name:
        scratch = Path(scratch_name)
        if args.kind == "subproject":
            project = copy_project(args.kind, scratch)
            require_in_readme(args, (project / "subprojects" / "versatil.wrap").read_text())
            (project / "subprojects" / "versatil").symlink_to(Path(args.source_root).resolve())
            # Forced, so an installed versatil elsewhere on the machine cannot stand in for it.
            step([args.meson, "setup", project / "build", project, "--force-fallback-for=versatil",
                  "-Dtorch=" + ("enabled" if args.torch else "disabled")])
            step([args.meson, "compile", "-C", project / "build"])
            binaries = project / "build"
        else:
            prefix, options = staged_install(args, scratch)
            if args.kind == "firmware":
                step([sys.executable, Path(args.source_root) / "tests/firmware/build.py", "--compiler",
                      args.arm_compiler, "--host-compiler", args.host_compiler,
                      "--include", prefix / options["includedir"],
                      "--source", Path(args.source_root) / "examples/firmware/quantizer_check.cpp",
                      "--output", scratch / "quantizer_check.o"])
                print("consumer firmware: ok")
                return
            project = copy_project(args.kind, scratch)
            if args.kind == "cmake":
                for line in ("find_package(versatil CONFIG REQUIRED)\n", "PRIVATE versatil::core)"):
                    require_in_readme(args, line, used=(project / "CMakeLists.txt").read_text())
                step([args.cmake, "-S", project, "-B", project / "build", "-G", "Ninja",
                      "-DCMAKE_PREFIX_PATH=" + str(prefix), "-DWITH_TORCH=" + ("ON" if args.torch else "OFF")])
                step([args.cmake, "--build", project / "build"])
                binaries = project / "build"
            else:
                # The README's lines as they are; PKG_CONFIG_PATH finds the staged .pc files.
                env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / options["libdir"] / "pkgconfig"))
                for program, flags in zip(programs, ["--cflags versatil", "--cflags --libs versatil-libtorch"]):
                    line = f"c++ -std=c++20 app.cpp $(pkg-config {flags}) -o app"
                    require_in_readme(args, line)
                    step(line.replace("app", program), cwd=project, env=env, shell=True)
                if args.torch:  # the layer's former name gives the same flags
                    step('test "$(pkg-config --cflags --libs versatil-torch)" = '
                         '"$(pkg-config --cflags --libs versatil-libtorch)"', env=env, shell=True)
                binaries = project
        for program in programs:
            step([binaries / program])
    print(f"consumer {args.kind}: ok ({', '.join(programs)} built and run)")


if __name__ == "__main__":
    main()
