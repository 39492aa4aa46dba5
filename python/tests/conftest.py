"""pytest setup for gpumem's Python tests.

The package is imported from the build tree (PYTHONPATH=<build>/python, set by ctest). With
GPUMEM_PYTEST_REQUIRE_GPU=1 (ctest's gpu.pytest) the whole run is skipped, exit code 77, when no CUDA device
is usable, and otherwise runs on the cuda backend.
"""

import gc
import os
import subprocess
import sys
import textwrap

import pytest


def pytest_configure(config):
    if os.environ.get("GPUMEM_PYTEST_REQUIRE_GPU") == "1":
        os.environ["GPUMEM_BACKEND"] = "cuda"
        import gpumem

        try:
            gpumem.alloc(0)
            # Choosing the backend happens on first use; a probe allocation selects it.
            p = gpumem.alloc(256)
            gpumem.free(p)
        except gpumem.CUDARuntimeError as error:
            pytest.exit(f"no CUDA device is usable here: {error}", returncode=77)


def pytest_sessionfinish(session, exitstatus):
    """Nothing from gpumem.alloc/zeros may outlive the suite: every test frees what it allocates. (The
    interpreter does not free module-level objects at exit, so a leak check of the process, such as
    compute-sanitizer's, cannot tell; gpumem's own count can.)"""
    import gc

    import gpumem

    gc.collect()
    live = gpumem.live_allocation_count()
    if live != 0 and exitstatus == 0:
        session.exitstatus = 1
        print(f"\ngpumem: {live} allocation(s) from gpumem.alloc/zeros were never freed by the tests")


@pytest.fixture
def current_resource():
    """Restores the current device's resource after the test, whatever the test set."""
    from gpumem import mr

    previous = mr.get_current_device_resource()
    yield
    gc.collect()
    mr.set_current_device_resource(previous)


@pytest.fixture
def run_on_two_host_devices():
    """A function that runs a Python script (dedented) in a new interpreter on the host backend with two
    emulated devices, and asserts that it exited with 0 after printing "ok" (the device count is fixed when the
    backend starts, so a second device needs a new process)."""

    def run(script, timeout=60):
        env = dict(os.environ, GPUMEM_BACKEND="host", GPUMEM_HOST_DEVICES="2")
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr

    return run
