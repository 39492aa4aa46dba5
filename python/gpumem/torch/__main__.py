"""python -m gpumem.torch [--conf CONF] script.py [args...]: runs a program with gpumem as PyTorch's allocator,
unchanged (install(), then the script as __main__, with sys.argv as the script sees it).

python -m gpumem.torch --check: says how libgpumem_torch_allocator.so was built (with PyTorch's headers or not,
and which PyTorch release) and whether the running PyTorch matches; exits with 1 when install() would refuse.
"""

from __future__ import annotations

import os
import runpy
import sys

USAGE = "usage: python -m gpumem.torch [--conf CONF] script.py [args...]\n       python -m gpumem.torch --check"


def check() -> int:
    """Prints the allocator library's build and the running PyTorch; returns the exit status."""
    from .. import cuda
    from ..allocators import torch as allocators_torch
    from . import _install

    path = allocators_torch.torch_allocator_library_path()
    print(f"library: {path}")
    try:
        library = allocators_torch._installed_library()
    except (FileNotFoundError, RuntimeError) as error:
        print(f"unusable: {error}")
        return 1
    built = _install._torch_version_of(library) if library.gpumem_torch_built_with_torch() else ""
    print(f"built with PyTorch: {'yes, PyTorch ' + built if built else 'no (allocations that fail return NULL)'}")
    try:
        import torch
    except ImportError:
        print("running PyTorch: none (PyTorch is not importable by this Python)")
        return 1
    running = torch.__version__
    matches = bool(built) and (built == "unknown" or built.split(".")[:2] == running.split("+")[0].split(".")[:2])
    print(f"running PyTorch: {running} ({'matches' if matches else 'does not match: reinstall gpumem with it'})")
    print(f"gpumem backend: {cuda.get_backend()}")
    return 0 if matches else 1


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--check"]:
        return check()
    conf = None
    if argv[:1] == ["--conf"]:
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        conf, argv = argv[1], argv[2:]
    elif argv[:1] and argv[0].startswith("--conf="):
        conf, argv = argv[0][len("--conf="):], argv[1:]
    if not argv or argv[0].startswith("-"):
        print(USAGE, file=sys.stderr)
        return 2
    from . import install

    install(conf)
    sys.argv = argv
    sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))  # as `python script.py` sets it
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
