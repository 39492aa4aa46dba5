#!/usr/bin/env python3
"""Runs every code block of README.md and docs/*.md against a build tree, so that no example goes stale.

    python3 scripts/doc_test.py --build-dir build/ci [--cli build/ci/cli/gpumem] [--python /usr/bin/python3]
                                [--jobs N] [--keep] [FILE.md ...]

(ctest runs it as `docs.blocks` wherever the Python package and the CLI are built: python/CMakeLists.txt.)

What each fenced block is, by its language tag:
- ```cpp: a complete C++ program. All of them are built as one CMake project against an install of the build
  tree (`cmake --install` into a scratch prefix, then `find_package(gpumem)`, as a user's project does), one
  executable per block at -O0 with -Wall -Wextra -Werror, and each is run on the host backend; its exit
  status must be 0. ```c: the same for a C99 program (linked with the C++ linker, as libgpumem needs).
- ```cmake: a complete CMakeLists.txt. Its `add_executable(NAME main.cpp)` gets, as main.cpp, the first
  ```cpp block of the same file (it must come before); it is configured against the same install, built,
  and NAME is run.
- ```python: a program run by the interpreter the package was built for, with the build tree's package
  importable (PYTHONPATH=<build>/python), on the host backend.
- ```sh, ```bash, ```shell: commands a user types, run by `bash -e -o pipefail` with the built `gpumem` and
  that interpreter (as `python3`) first on PATH. ```console: the same for the lines that start with `$ `
  (the other lines are their output, not checked).
- ```text, ```csv and blocks without a tag are output or file listings: never run.
Every block of one file runs in one scratch directory, in order, so a block may read what an earlier block
of its file wrote; the directory holds links to the source tree's top-level entries (data/, scripts/, ...),
so paths in the docs read as they do from a checkout's root.

A block that must not run here (a full build, a GPU-only program, a command that installs something) is
skipped only by a marker on the line before it (blank lines between are allowed), with its reason:

    <!-- doc-test: skip (builds the whole tree) -->

A block in a language not listed above is an error, so a new kind of block cannot go unchecked silently.
The run prints one line per block and a summary (run, passed, failed, skipped, not run); the exit status is
1 when a block failed, listing each as FILE:LINE.
"""

import argparse
import dataclasses
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(?P<directive>\S+)\s*(?:\((?P<reason>[^)]*)\))?\s*-->\s*$")
CXX = {"cpp", "c++", "cxx"}
C = {"c"}
CMAKE = {"cmake"}
PYTHON = {"python", "py", "python3"}
SHELL = {"sh", "bash", "shell"}
CONSOLE = {"console"}
OUTPUT = {"", "text", "csv", "output"}
TIMEOUT_S = 120


@dataclasses.dataclass
class Block:
    path: pathlib.Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip_reason: str | None = None

    def where(self, root):
        try:
            name = self.path.relative_to(root)
        except ValueError:
            name = self.path
        return f"{name}:{self.line}"

    def source(self, root):
        """The block as a source file whose diagnostics name the markdown file and its lines."""
        name = self.where(root).rsplit(":", 1)[0]
        return f'#line {self.line + 1} "{name}"\n{self.code}'

    def ident(self):
        stem = re.sub(r"[^A-Za-z0-9]+", "_", self.path.name)
        return f"{stem}_{self.line}"


class DocError(Exception):
    """A document the runner cannot accept (an unknown block language, a bad marker, an unclosed fence)."""


def parse_blocks(path):
    """Returns the fenced code blocks of one markdown file, with their skip markers."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks = []
    markers = set()  # lines of skip markers not yet claimed by the block after them
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            marker = MARKER.match(lines[i])
            if marker and marker["directive"] != "skip":
                raise DocError(f"{path}:{i + 1}: unknown doc-test directive '{marker['directive']}' (only 'skip')")
            if marker:
                markers.add(i)
            i += 1
            continue
        fence, indent = match["fence"], len(match["indent"])
        lang = match["info"].strip().split()[0].lower() if match["info"].strip() else ""
        start = i
        body = []
        i += 1
        while i < len(lines) and not re.match(rf"^ {{0,3}}{fence[0]}{{{len(fence)},}}\s*$", lines[i]):
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        if i == len(lines):
            raise DocError(f"{path}:{start + 1}: the code block is never closed")
        i += 1
        block = Block(path, start + 1, lang, "\n".join(body) + "\n")
        previous = start - 1
        while previous >= 0 and not lines[previous].strip():
            previous -= 1
        marker = MARKER.match(lines[previous]) if previous >= 0 else None
        if marker:
            if not (marker["reason"] or "").strip():
                raise DocError(f"{path}:{previous + 1}: a skip marker needs its reason: <!-- doc-test: skip (why) -->")
            if lang in OUTPUT:
                raise DocError(f"{path}:{previous + 1}: a skip marker before a ```{lang or '(no tag)'} block, "
                               "which never runs")
            block.skip_reason = marker["reason"].strip()
            markers.discard(previous)
        known = CXX | C | CMAKE | PYTHON | SHELL | CONSOLE | OUTPUT
        if lang not in known and block.skip_reason is None:
            raise DocError(f"{path}:{block.line}: no runner for ```{lang} blocks: use one of "
                           f"{', '.join(sorted(k for k in known if k))}, or ```text for output, or mark it "
                           "<!-- doc-test: skip (why) -->")
        blocks.append(block)
    if markers:
        raise DocError(f"{path}:{min(markers) + 1}: a skip marker with no code block right after it")
    return blocks


def run(command, cwd, env=None, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL):
    """Runs a command; returns (ok, combined output)."""
    try:
        done = subprocess.run(command, cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as error:
        out = error.stdout.decode(errors="replace") if error.stdout else ""
        return False, f"{out}\n(timed out after {timeout} s: {' '.join(map(str, command))})"
    out = done.stdout.decode(errors="replace")
    if done.returncode != 0:
        out += f"\n(exit status {done.returncode}: {' '.join(map(str, command))})"
    return done.returncode == 0, out


class Runner:
    def __init__(self, args, root, work):
        self.args = args
        self.root = root
        self.work = work
        self.results = {}  # id(block) -> (ok, output)
        self.env = dict(os.environ)
        self.env["GPUMEM_BACKEND"] = "host"
        self.env["PYTHONDONTWRITEBYTECODE"] = "1"
        self.python_env = dict(kv.split("=", 1) for kv in args.python_env)
        self.bin = work / "bin"
        self.bin.mkdir()
        if args.cli:
            os.symlink(os.path.abspath(args.cli), self.bin / "gpumem")
        # `python3` on PATH is the package's interpreter, with the package importable (and, for a sanitized
        # build, the sanitizer runtimes preloaded): a wrapper, so that only Python gets that environment.
        exports = "".join(f"export {key}={shlex.quote(value)}\n" for key, value in self.python_env.items())
        wrapper = self.bin / "python3"
        wrapper.write_text(f"#!/bin/sh\n{exports}exec {shlex.quote(args.python)} \"$@\"\n")
        wrapper.chmod(0o755)
        self.env["PATH"] = f"{self.bin}{os.pathsep}{self.env.get('PATH', '')}"
        python_path = str(pathlib.Path(args.build_dir).resolve() / "python")
        self.env["PYTHONPATH"] = python_path + (os.pathsep + os.environ["PYTHONPATH"]
                                                if os.environ.get("PYTHONPATH") else "")
        self.prefix = None

    def scratch(self, path):
        """The scratch directory of one markdown file: links to the source tree's top-level entries."""
        directory = self.work / "files" / re.sub(r"[^A-Za-z0-9]+", "_", Block(path, 0, "", "").where(self.root))
        if not directory.exists():
            directory.mkdir(parents=True)
            for entry in self.root.iterdir():
                if entry.name not in {".git", "build"}:
                    os.symlink(entry, directory / entry.name)
        return directory

    # --- C and C++ ------------------------------------------------------------------------------------
    def install(self):
        if self.prefix is None:
            self.prefix = self.work / "prefix"
            ok, out = run(["cmake", "--install", self.args.build_dir, "--prefix", self.prefix], cwd=self.work)
            if not ok:
                raise RuntimeError(f"cmake --install {self.args.build_dir} failed:\n{out}")
        return self.prefix

    def configure_and_build(self, project, targets):
        """Configures and builds one consumer project; returns (configure ok, output, built target names)."""
        build = project / "build"
        configure = ["cmake", "-S", project, "-B", build, "-G", "Ninja", f"-DCMAKE_PREFIX_PATH={self.install()}",
                     "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF",
                     f"-DCMAKE_CXX_FLAGS={self.args.cxx_flags}", f"-DCMAKE_C_FLAGS={self.args.c_flags}",
                     f"-DCMAKE_EXE_LINKER_FLAGS={self.args.exe_linker_flags}"]
        if self.args.cxx_compiler:
            configure.append(f"-DCMAKE_CXX_COMPILER={self.args.cxx_compiler}")
        if self.args.c_compiler:
            configure.append(f"-DCMAKE_C_COMPILER={self.args.c_compiler}")
        if self.args.compiler_launcher:
            configure += [f"-DCMAKE_CXX_COMPILER_LAUNCHER={self.args.compiler_launcher}",
                          f"-DCMAKE_C_COMPILER_LAUNCHER={self.args.compiler_launcher}"]
        ok, out = run(configure, cwd=project, timeout=300)
        if not ok:
            return False, out, set()
        _, build_out = run(["cmake", "--build", build, "-j", str(self.args.jobs), "--", "-k", "0"], cwd=project,
                           timeout=900)
        built = {name for name in targets if (build / name).exists()}
        return True, build_out, built

    def run_compiled(self, blocks):
        """Builds every C/C++ block as an executable of one project, then runs each."""
        if not blocks:
            return
        project = self.work / "programs"
        project.mkdir()
        cmake = ["cmake_minimum_required(VERSION 3.25)", "project(gpumem_doc_blocks LANGUAGES C CXX)",
                 "find_package(gpumem CONFIG REQUIRED)"]
        for block in blocks:
            name = block.ident()
            source = f"{name}.{'cpp' if block.lang in CXX else 'c'}"
            (project / source).write_text(block.source(self.root))
            cmake.append(f"add_executable({name} {source})")
            cmake.append(f"target_link_libraries({name} PRIVATE gpumem::gpumem)")
            if block.lang in C:
                cmake.append(f"set_target_properties({name} PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON "
                             "LINKER_LANGUAGE CXX)")
            cmake.append(f"target_compile_options({name} PRIVATE -O0 -Wall -Wextra -Werror)")
        (project / "CMakeLists.txt").write_text("\n".join(cmake) + "\n")
        try:
            print(f"doc-test: building {len(blocks)} C/C++ block(s) against {self.install()}", flush=True)
            configured, out, built = self.configure_and_build(project, {b.ident() for b in blocks})
        except RuntimeError as error:
            configured, out, built = False, str(error), set()
        for block in blocks:
            if not configured:
                self.results[id(block)] = (False, f"configuring the blocks' project failed:\n{out}")
            elif block.ident() not in built:
                self.results[id(block)] = (False, f"does not compile:\n{errors_of(out, block.ident())}")
            else:
                self.results[id(block)] = run([project / "build" / block.ident()], cwd=self.scratch(block.path),
                                              env=self.env)

    def run_cmake(self, block, blocks_of_file):
        main = next((other for other in blocks_of_file if other.line < block.line and other.lang in CXX), None)
        names = re.findall(r"add_executable\(\s*([A-Za-z0-9_.-]+)", block.code)
        if main is None or len(names) != 1:
            return False, ("a ```cmake block needs a ```cpp block first in its file (its main.cpp) and "
                           "exactly one add_executable(NAME main.cpp)")
        project = self.work / f"cmake_{block.ident()}"
        project.mkdir()
        (project / "CMakeLists.txt").write_text(block.code)
        (project / "main.cpp").write_text(main.source(self.root))
        try:
            configured, out, built = self.configure_and_build(project, set(names))
        except RuntimeError as error:
            return False, str(error)
        if not configured:
            return False, f"configuring the project failed:\n{out}"
        if names[0] not in built:
            return False, f"building the project failed:\n{out}"
        return run([project / "build" / names[0]], cwd=self.scratch(block.path), env=self.env)

    # --- Python and shell -----------------------------------------------------------------------------
    def run_python(self, block):
        script = self.work / f"{block.ident()}.py"
        script.write_text(block.code)
        return run([self.bin / "python3", script], cwd=self.scratch(block.path), env=self.env)

    def run_shell(self, block):
        code = block.code
        if block.lang in CONSOLE:
            code = "".join(line[2:] + "\n" for line in code.splitlines() if line.startswith("$ "))
        script = self.work / f"{block.ident()}.sh"
        script.write_text(code)
        return run(["bash", "-e", "-o", "pipefail", script], cwd=self.scratch(block.path), env=self.env)


def errors_of(build_output, name):
    """The part of a build log about one target (ninja's FAILED: entry and what follows it)."""
    parts = re.split(r"(?m)^(?=\[\d+/\d+\] |FAILED: )", build_output)
    mine = [part for part in parts if f"{name}." in part.split("\n", 1)[0] or f"{name}.dir" in part]
    return "".join(part for part in mine if "FAILED" in part or "error" in part) or build_output


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=pathlib.Path,
                        help="markdown files (default: README.md and docs/*.md of the source tree)")
    parser.add_argument("--source-dir", type=pathlib.Path,
                        default=pathlib.Path(__file__).resolve().parent.parent)
    parser.add_argument("--build-dir", required=True, help="a configured and built gpumem tree")
    parser.add_argument("--cli", help="the built gpumem command (default: <build>/cli/gpumem)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter the package was built for")
    parser.add_argument("--python-env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment for the interpreter only (a sanitized module's preloads)")
    parser.add_argument("--cxx-compiler", default="")
    parser.add_argument("--c-compiler", default="")
    parser.add_argument("--compiler-launcher", default="", help="e.g. ccache, for the C and C++ blocks")
    parser.add_argument("--cxx-flags", default="", help="the build's CMAKE_CXX_FLAGS (sanitizers)")
    parser.add_argument("--c-flags", default="")
    parser.add_argument("--exe-linker-flags", default="")
    parser.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 4))
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory and say where it is")
    parser.add_argument("--verbose", action="store_true", help="also print what passing blocks printed")
    args = parser.parse_args()

    root = args.source_dir.resolve()
    args.build_dir = str(pathlib.Path(args.build_dir).resolve())
    files = args.files or [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    if args.cli is None:
        candidate = pathlib.Path(args.build_dir) / "cli" / "gpumem"
        args.cli = str(candidate) if candidate.exists() else None

    try:
        blocks_by_file = {path.resolve(): parse_blocks(path.resolve()) for path in files}
    except (DocError, OSError) as error:
        print(f"doc-test: error: {error}", file=sys.stderr)
        return 1
    blocks = [block for file_blocks in blocks_by_file.values() for block in file_blocks]

    work = pathlib.Path(tempfile.mkdtemp(prefix="gpumem-doc-test-"))
    try:
        runner = Runner(args, root, work)
        runnable = [b for b in blocks if b.skip_reason is None and b.lang not in OUTPUT]
        runner.run_compiled([b for b in runnable if b.lang in CXX | C])
        for block in runnable:
            if block.lang in CMAKE:
                runner.results[id(block)] = runner.run_cmake(block, blocks_by_file[block.path])
            elif block.lang in PYTHON:
                runner.results[id(block)] = runner.run_python(block)
            elif block.lang in SHELL | CONSOLE:
                if args.cli is None:
                    runner.results[id(block)] = (False, "no gpumem command in the build tree (--cli)")
                else:
                    runner.results[id(block)] = runner.run_shell(block)
    finally:
        if args.keep:
            print(f"doc-test: scratch files kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    failed, skipped, not_run, passed = [], [], 0, 0
    for block in blocks:
        where = f"{block.where(root)} ```{block.lang or '(no tag)'}"
        if block.skip_reason is not None:
            skipped.append(block)
            print(f"skip  {where}: {block.skip_reason}")
        elif block.lang in OUTPUT:
            not_run += 1
        else:
            ok, out = runner.results[id(block)]
            if ok:
                passed += 1
                print(f"ok    {where}")
                if args.verbose:
                    print("".join(f"    | {line}\n" for line in out.rstrip().splitlines()), end="")
            else:
                failed.append(block)
                print(f"FAIL  {where}\n" + "".join(f"    | {line}\n" for line in out.rstrip().splitlines()))
    print(f"doc-test: {passed + len(failed)} blocks run ({passed} passed, {len(failed)} failed), "
          f"{len(skipped)} skipped by a marker, {not_run} output blocks not run, in {len(files)} files")
    if failed:
        print("doc-test: failing blocks:\n" + "".join(f"  {b.where(root)}\n" for b in failed), end="")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
