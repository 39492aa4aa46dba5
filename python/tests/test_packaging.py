"""`pip install ./python`: the PEP 517 backend (python/build_backend) builds a wheel that installs and imports.

The wheel is built from the build tree these tests run from (reuse-build: no reconfiguration), so this
checks the packing, the metadata and the import of the installed copy; a from-scratch `pip install ./python`
is run by scripts/gpu_check.sh on the GPU machine.
"""

import base64
import csv
import hashlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import gpumem

ROOT = Path(__file__).resolve().parents[2]
BACKEND_PATH = ROOT / "python" / "build_backend" / "gpumem_build_backend.py"
BUILD_DIR = Path(gpumem.__file__).resolve().parents[2]


def load_backend():
    spec = importlib.util.spec_from_file_location("gpumem_build_backend", BACKEND_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    if not (BUILD_DIR / "CMakeCache.txt").is_file() or shutil.which("cmake") is None:
        pytest.skip("gpumem is not imported from a CMake build tree")
    out = tmp_path_factory.mktemp("wheel")
    backend = load_backend()
    name = backend.build_wheel(str(out), {"build-dir": str(BUILD_DIR), "reuse-build": "1", "jobs": "1"})
    return out / name, backend


def test_the_backend_needs_nothing_from_pypi():
    backend = load_backend()
    assert backend.get_requires_for_build_wheel() == []
    for pyproject in (ROOT / "python" / "pyproject.toml", ROOT / "pyproject.toml"):
        text = pyproject.read_text()
        assert "requires = []" in text and 'build-backend = "gpumem_build_backend"' in text


def test_the_wheel_is_named_for_this_interpreter_and_has_its_metadata(wheel):
    path, backend = wheel
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert path.name.startswith(f"gpumem-{backend._version()}-{tag}-{tag}-linux_")
    with zipfile.ZipFile(path) as z:
        names = set(z.namelist())
        dist_info = f"gpumem-{backend._version()}.dist-info"
        metadata = z.read(f"{dist_info}/METADATA").decode()
        assert "Name: gpumem" in metadata and f"Version: {backend._version()}" in metadata
        assert "Root-Is-Purelib: false" in z.read(f"{dist_info}/WHEEL").decode()
        assert "gpumem/__init__.py" in names and "gpumem/py.typed" in names
        assert any(n.startswith("gpumem/_gpumem") and n.endswith(".so") for n in names)
        assert not any("__pycache__" in n for n in names)


def test_record_lists_every_file_with_its_hash(wheel):
    path, _ = wheel
    with zipfile.ZipFile(path) as z:
        record_name = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(z.read(record_name).decode())))
        listed = {row[0] for row in rows}
        assert listed == set(z.namelist())
        for name, digest, size in rows:
            if name == record_name:
                continue
            data = z.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data), name


def test_the_installed_package_imports_and_allocates(wheel, tmp_path):
    path, _ = wheel
    site = tmp_path / "site"
    with zipfile.ZipFile(path) as z:
        z.extractall(site)  # what pip does with a wheel, less the bookkeeping
    env = dict(os.environ, PYTHONPATH=str(site), GPUMEM_BACKEND="host")
    code = ("import gpumem, sys; p = gpumem.alloc(4096); gpumem.free(p); "
            "print(gpumem.__file__); print(gpumem.live_allocation_count())")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    location, live = result.stdout.split()
    assert Path(location).is_relative_to(site) and live == "0"


def test_pip_installs_the_wheel(wheel, tmp_path):
    path, _ = wheel
    pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    if pip.returncode != 0:
        pytest.skip("pip is not installed for this interpreter")
    target = tmp_path / "target"
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target",
                             str(target), str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert any((target / "gpumem").glob("_gpumem*.so"))
    assert (target / f"gpumem-{load_backend()._version()}.dist-info" / "RECORD").is_file()


def test_build_sdist_says_to_install_from_the_checkout(tmp_path):
    with pytest.raises(RuntimeError, match="pip install ./python"):
        load_backend().build_sdist(str(tmp_path))


def test_reuse_build_needs_a_configured_build(tmp_path):
    with pytest.raises(RuntimeError, match="not a configured CMake build directory"):
        load_backend().build_wheel(str(tmp_path), {"build-dir": str(tmp_path / "nothing"), "reuse-build": "1"})


def test_a_broken_tool_shim_on_path_is_skipped(tmp_path, monkeypatch):
    shim_dir = tmp_path / "venv-bin"
    shim_dir.mkdir()
    shim = shim_dir / "cmake"
    shim.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named cmake' >&2\nexit 1\n")
    shim.chmod(0o755)
    real = shutil.which("cmake")
    if real is None:
        pytest.skip("no cmake here")
    monkeypatch.setenv("PATH", f"{shim_dir}{os.pathsep}{os.environ['PATH']}")
    assert load_backend()._working_tool("cmake") == real
    assert load_backend()._working_tool("no-such-tool-anywhere") is None
