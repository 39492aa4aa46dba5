"""Runs a PyTorch program with gpumem as PyTorch's allocator in a fresh interpreter (the allocator can be swapped only
once per process, before the first CUDA tensor), for the GPU tests of gpumem.torch; skips where PyTorch, a GPU or a
library built with PyTorch is missing."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gpumem

# gpumem.torch.install() with the configuration in GPUMEM_TORCH_ALLOC_CONF; where a build predates install(), the
# same through torch_allocator() and gpumem.torch._graphs.set_hooks().
PRELUDE = """
import gc, os, sys
import torch
import gpumem, gpumem.torch
if hasattr(gpumem.torch, "install"):
    gpumem.torch.install()
else:
    import gpumem.allocators
    from gpumem.allocators.torch import _installed_library
    from gpumem.torch import _graphs
    allocator = gpumem.allocators.torch_allocator()
    conf = dict(item.split(":", 1) for item in os.environ.get("GPUMEM_TORCH_ALLOC_CONF", "").split(",") if item)
    _graphs.set_hooks(allocator, _installed_library(), conf)
    torch.cuda.memory.change_current_allocator(allocator)
"""


def require_torch_on_gpu():
    """Skips the calling test unless PyTorch, a GPU, gpumem's cuda backend and a library built with PyTorch are here."""
    torch = pytest.importorskip("torch")
    if gpumem.cuda.get_backend() != "cuda" or not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU and gpumem's cuda backend")
    from gpumem.allocators.torch import _installed_library

    if not _installed_library().gpumem_torch_built_with_torch():
        pytest.skip("libgpumem_torch_allocator was built without PyTorch: reconfigure where torch imports")


def run_torch(script, conf=None, setup="", timeout=600):
    """Runs PRELUDE, `setup` and `script` (each dedented) in a new interpreter; asserts it printed "ok" last and
    exited with 0. `conf`: GPUMEM_TORCH_ALLOC_CONF for it. Returns the CompletedProcess."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(Path(gpumem.__file__).resolve().parents[1])] + [p for p in [environment.get("PYTHONPATH")] if p]
    )
    environment.pop("GPUMEM_TORCH_ALLOC_CONF", None)
    if conf is not None:
        environment["GPUMEM_TORCH_ALLOC_CONF"] = conf
    result = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(setup) + textwrap.dedent(script)], env=environment,
                            capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), (
        f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-6000:]}"
    )
    return result
