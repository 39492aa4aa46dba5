#!/usr/bin/env python3
"""The layering rule of gpumem, checked over the include graph of the whole tree.

Each source or header belongs to one layer; a file may include files of its own layer and of the layers
below it, never of a layer above (the layer READMEs: include/gpumem/README.md, tools/README.md). Three
more rules hold beside the ranks:
  - mr/detail is pure: it includes no CUDA header and nothing of gpumem outside mr/detail, detail/ (the lock
    annotations) and export.hpp;
  - only the backend (src/backend) calls the CUDA runtime or driver (a call of a cuda*/cu* function);
  - above the core (tools, the command, the Python extension, the examples) nothing reaches into the
    backend: no include of gpumem/backend/ and no call of detail::get_backend(); they use the handles
    (device.hpp re-exports the backend's kind and the device properties). The benchmarks are the one
    exception: they time the raw backend calls (cudaMalloc, cudaMemcpyAsync) as the peers of gpumem's
    resources, through the backend so that they run on the host backend too.

Usage: check_layers.py [ROOT]   (default: the checkout that holds this script). Prints each violation as
FILE:LINE: what is wrong, then a summary line; exits 1 if any, 0 if none.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

# Layers from the bottom up. A path belongs to the first layer whose pattern matches it (patterns are
# prefixes of paths relative to the checkout; headers are named by their include path under include/ or
# tools/include/ as well, see `include_key`).
LAYERS: list[tuple[str, list[str]]] = [
    # The headers of mr/detail; their sources (src/mr/detail) belong to mr: they may throw gpumem's errors.
    ("pure", ["include/gpumem/export.hpp", "include/gpumem/detail/", "include/gpumem/mr/detail/"]),
    ("base", ["include/gpumem/error.hpp", "include/gpumem/debug_log.hpp", "include/gpumem/cuda_device_id.hpp",
              "include/gpumem/cuda_stream_view.hpp", "include/gpumem/backend/", "src/backend/", "src/error.cpp",
              "src/debug_log.cpp", "src/cuda_stream_view.cpp"]),
    ("handles", ["include/gpumem/device.hpp", "include/gpumem/cuda_stream.hpp", "include/gpumem/cuda_stream_pool.hpp",
                 "include/gpumem/event.hpp", "include/gpumem/graph.hpp", "include/gpumem/before_stream_destroy.hpp",
                 "include/gpumem/prefetch.hpp", "include/gpumem/cublas_handle.hpp", "src/device.cpp", "src/cuda_stream.cpp", "src/cuda_stream_pool.cpp",
                 "src/event.cpp", "src/graph.cpp", "src/before_stream_destroy.cpp", "src/prefetch.cpp",
                 "src/cublas_handle.cpp"]),
    ("mr", ["include/gpumem/mr/", "src/mr/"]),
    ("buffer", ["include/gpumem/buffer/", "include/gpumem/transfer.hpp", "src/buffer/", "src/transfer/"]),
    ("ipc", ["include/gpumem/ipc.hpp", "src/ipc/"]),
    ("api", ["include/gpumem/plain.hpp", "include/gpumem.h", "src/plain.cpp", "src/c_api.cpp"]),
    ("tools", ["tools/"]),
    ("apps", ["cli/", "benchmarks/", "python/src/", "python/torch_allocator/", "examples/"]),
]
RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}
CORE_TOP = RANK["api"]

SCANNED = ["include", "src", "tools", "cli", "benchmarks", "python/src", "python/torch_allocator", "examples"]
SUFFIXES = {".hpp", ".h", ".cpp", ".c", ".cu", ".cuh"}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)
CUDA_HEADER = re.compile(r"^(cuda|cuda_runtime|cuda_runtime_api|driver_types|vector_types|cub|thrust|cuda/)")
# A call of a CUDA runtime (cudaXxx) or driver (cuXxx) function; types (cudaStream_t) are not calls.
CUDA_CALL = re.compile(r"\b((?:cuda|cu)[A-Z]\w*)\s*\(")
BACKEND_CALL = re.compile(r"\bget_backend\s*\(")


def layer_of(path: str) -> str | None:
    for name, prefixes in LAYERS:
        if any(path == p or (p.endswith("/") and path.startswith(p)) for p in prefixes):
            return name
    return None


def strip_comments_and_strings(text: str) -> str:
    """Blanks comments and string/char literals, keeping line breaks so that line numbers stay right."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            delimiter = text[i + 2:text.find("(", i + 2)]
            j = text.find(")" + delimiter + '"', i)
            j = n if j < 0 else j + len(delimiter) + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" ")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    files = sorted(p for d in SCANNED if (root / d).is_dir() for p in (root / d).rglob("*")
                   if p.suffix in SUFFIXES and p.is_file())
    # Where an include path resolves: public headers of the core and the tools, then private ones.
    include_roots = [root / "include", root / "tools" / "include", root / "src", root / "tools" / "src"]

    def resolve(includer: Path, spelled: str, quoted: bool) -> str | None:
        candidates = ([includer.parent / spelled] if quoted else []) + [r / spelled for r in include_roots]
        for candidate in candidates:
            if candidate.is_file():
                return candidate.resolve().relative_to(root.resolve()).as_posix()
        return None

    violations: list[str] = []
    unassigned: list[str] = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        layer = layer_of(rel)
        if layer is None:
            unassigned.append(rel)
            continue
        raw = path.read_text(encoding="utf-8", errors="replace")
        for match in INCLUDE.finditer(raw):
            line = raw.count("\n", 0, match.start()) + 1
            spelled, quoted = match.group(2), match.group(1) == '"'
            if layer == "pure" and CUDA_HEADER.match(spelled):
                violations.append(f"{rel}:{line}: mr/detail is pure but includes the CUDA header <{spelled}>")
            if RANK[layer] > CORE_TOP and spelled.startswith("gpumem/backend/") and not rel.startswith("benchmarks/"):
                violations.append(f"{rel}:{line}: {layer} reaches into the backend: #include <{spelled}> "
                                  "(use the public API: device.hpp, cuda_stream.hpp, transfer.hpp, mr/)")
            target = resolve(path, spelled, quoted)
            if target is None:
                continue  # a system or third-party header
            target_layer = layer_of(target)
            if target_layer is None:
                continue
            if RANK[target_layer] > RANK[layer]:
                violations.append(f"{rel}:{line}: layer '{layer}' includes {target} of the higher layer "
                                  f"'{target_layer}'")
            elif layer == "pure" and target_layer == "pure" and "mr/detail" not in target \
                    and not target.startswith("include/gpumem/detail/") and not target.endswith("export.hpp"):
                violations.append(f"{rel}:{line}: mr/detail is pure but includes {target}")
        code = strip_comments_and_strings(raw)
        if not rel.startswith("src/backend/") and not rel.startswith("examples/"):
            for match in CUDA_CALL.finditer(code):
                if match.group(1).endswith("_t"):
                    continue  # a type (operator cudaStream_t(), cudaError_t(x)), not a call
                line = code.count("\n", 0, match.start()) + 1
                violations.append(f"{rel}:{line}: calls the CUDA API ({match.group(1)}) outside the backend "
                                  "(src/backend)")
        if RANK[layer] > CORE_TOP and not rel.startswith("benchmarks/"):
            for match in BACKEND_CALL.finditer(code):
                line = code.count("\n", 0, match.start()) + 1
                violations.append(f"{rel}:{line}: {layer} calls detail::get_backend(); use the public API")
    for rel in unassigned:
        violations.append(f"{rel}: belongs to no layer: add it to LAYERS in tests/layering/check_layers.py "
                          "and to its layer's README")
    for v in violations:
        print(v)
    print(f"layering: {len(files)} files checked, {len(violations)} violations")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
