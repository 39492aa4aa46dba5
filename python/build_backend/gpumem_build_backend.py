"""The PEP 517 build backend behind ``pip install ./python`` (and ``pip install .`` from the project root).

It needs nothing from PyPI: pip's isolated build environment stays empty (``requires = []``), and this
backend drives the project's own CMake build, then packs what the build put in ``<build>/python/gpumem``
(the extension module, the pure-Python package, the PyTorch allocator library, the stubs, the command-line
tool ``_bin/gpumem`` with the allocation logs in ``_data/logs``) into a wheel whose console script
``gpumem`` runs that tool. The wheel's version is CMake's ``project(gpumem VERSION ...)``, read from the
top-level CMakeLists.txt, the same one the build writes into ``gpumem/_version.py``.

What the build needs is what the README's commands install: CMake >= 3.25, a C++20 compiler, the CUDA
toolkit, pybind11 importable by the interpreter pip runs (Debian's python3-pybind11, or pybind11 in the
environment), and Ninja if present (else Make).

Settings (``pip install ./python --config-settings KEY=VALUE``, or the environment variable):
- ``build-dir`` / ``GPUMEM_WHEEL_BUILD_DIR``: where CMake builds (default: ``<project>/build/wheel-<python tag>``,
  kept, so a second install only rebuilds what changed).
- ``reuse-build`` / ``GPUMEM_WHEEL_REUSE_BUILD=1``: build-dir is an existing, configured gpumem build with
  GPUMEM_BUILD_PYTHON=ON (for example the test build): build the package's targets there without
  reconfiguring it.
- ``jobs`` / ``GPUMEM_JOBS``: build parallelism (default: the number of cores).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

_PACKAGE = "gpumem"
_SUMMARY = "A GPU memory manager: RMM's resources, CuPy's memory API, unified buffers, allocators for CuPy, PyTorch, Numba"
# As [project.scripts] in pyproject.toml (python/tests/test_packaging.py checks that they agree).
_CONSOLE_SCRIPTS = {"gpumem": "gpumem._cli:main"}


# ---- the PEP 517 hooks -------------------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    """Nothing beyond what the machine has: see the module's docstring."""
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """Writes ``gpumem-<version>.dist-info`` with METADATA and WHEEL; pip reads it before building."""
    dist_info = Path(metadata_directory) / _dist_info_name()
    dist_info.mkdir(parents=True, exist_ok=True)
    for name, text in _metadata_files().items():
        (dist_info / name).write_text(text, encoding="utf-8")
    return dist_info.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """Builds the package with CMake and packs it as ``gpumem-<version>-<tags>.whl`` in wheel_directory."""
    settings = _Settings(config_settings)
    package_dir = _build_package(settings)
    wheel_path = Path(wheel_directory) / f"{_PACKAGE}-{_version()}-{_wheel_tag()}.whl"
    _write_wheel(wheel_path, package_dir)
    return wheel_path.name


def build_sdist(sdist_directory, config_settings=None):
    """A source distribution is the project itself: pip installs from the checkout (``pip install ./python``)."""
    raise RuntimeError(
        "gpumem does not build source distributions: install from the checkout with `pip install ./python` "
        "(or `pip install .` in the project root)")


# ---- building ---------------------------------------------------------------------------------------------

class _Settings:
    """The backend's settings: --config-settings first, then the environment, then defaults."""

    def __init__(self, config_settings):
        config = dict(config_settings or {})
        root = _project_root()
        build_dir = config.get("build-dir") or os.environ.get("GPUMEM_WHEEL_BUILD_DIR")
        self.build_dir = Path(build_dir).resolve() if build_dir else root / "build" / f"wheel-{_python_tag()}"
        reuse = config.get("reuse-build") or os.environ.get("GPUMEM_WHEEL_REUSE_BUILD", "")
        self.reuse_build = str(reuse).lower() in ("1", "true", "yes", "on")
        self.jobs = str(config.get("jobs") or os.environ.get("GPUMEM_JOBS") or os.cpu_count() or 2)


def _build_environment():
    """The environment of the build's tools: this one, less what pip's build isolation adds to Python's
    path. The build needs nothing from the (empty) isolated environment, but the interpreter's own packages
    (pybind11) and tools that are Python entry points (a pip-installed ``cmake``) need the real one."""
    environment = dict(os.environ)
    for variable in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONNOUSERBASE"):
        environment.pop(variable, None)
    return environment


def _run(command, **kwargs):
    print("gpumem build:", " ".join(str(part) for part in command), file=sys.stderr, flush=True)
    # The build's output goes to stderr: pip shows it with -v, and keeps stdout for its own protocol.
    subprocess.run([str(part) for part in command], check=True, stdout=sys.stderr, env=_build_environment(),
                   **kwargs)


def _working_tool(name: str):
    """The first ``name`` on PATH that runs (``name --version`` succeeds), or None.

    Virtual environments often hold a ``cmake`` or ``ninja`` entry point of a pip package whose module is
    gone; such a shim is skipped in favour of the next one on PATH (for example /usr/bin/cmake).
    """
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = shutil.which(name, path=directory) if directory else None
        if candidate is None:
            continue
        try:
            probe = subprocess.run([candidate, "--version"], capture_output=True, timeout=60, env=_build_environment())
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return candidate
    return None


def _build_package(settings: _Settings) -> Path:
    """Configures (unless reusing) and builds; returns ``<build>/python/gpumem``."""
    cmake = _working_tool("cmake")
    if cmake is None:
        raise RuntimeError("building gpumem needs CMake >= 3.25 on PATH (apt-get install cmake)")
    root = _project_root()
    if settings.reuse_build:
        if not (settings.build_dir / "CMakeCache.txt").is_file():
            raise RuntimeError(f"reuse-build: {settings.build_dir} is not a configured CMake build directory")
    else:
        configure = [cmake, "-S", root, "-B", settings.build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     "-DGPUMEM_BUILD_PYTHON=ON", "-DGPUMEM_BUILD_TESTS=OFF", "-DGPUMEM_BUILD_CLI=ON",
                     "-DGPUMEM_BUILD_BENCHMARKS=OFF", "-DGPUMEM_WARNINGS_AS_ERRORS=OFF",
                     f"-DGPUMEM_PYTHON_EXECUTABLE={sys.executable}"]
        ninja = _working_tool("ninja")
        if ninja and not (settings.build_dir / "Makefile").is_file():
            configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
        _run(configure)
    _run([cmake, "--build", settings.build_dir, "--target", "gpumem_python_package", "--parallel", settings.jobs])
    package_dir = settings.build_dir / "python" / _PACKAGE
    if not any(package_dir.glob("_gpumem*.so")):
        raise RuntimeError(f"the build did not produce the extension module in {package_dir}")
    if not os.access(package_dir / "_bin" / "gpumem", os.X_OK):
        raise RuntimeError(f"the build did not put the command-line tool in {package_dir / '_bin'}: "
                           "a build reused with reuse-build needs GPUMEM_BUILD_CLI=ON")
    return package_dir


# ---- the wheel --------------------------------------------------------------------------------------------

def _write_wheel(wheel_path: Path, package_dir: Path) -> None:
    """A wheel is a zip: the package's files, then dist-info with METADATA, WHEEL and RECORD (hashes of all)."""
    dist_info = _dist_info_name()
    records = []
    wheel_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = wheel_path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp_path, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for path in sorted(package_dir.rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            arcname = f"{_PACKAGE}/{path.relative_to(package_dir).as_posix()}"
            records.append(_add(wheel, arcname, path.read_bytes(), executable=os.access(path, os.X_OK)))
        for name, text in _metadata_files().items():
            records.append(_add(wheel, f"{dist_info}/{name}", text.encode("utf-8")))
        record_name = f"{dist_info}/RECORD"
        record_text = "".join(f"{name},{digest},{size}\n" for name, digest, size in records) + f"{record_name},,\n"
        wheel.writestr(record_name, record_text)
    tmp_path.replace(wheel_path)


def _add(wheel: zipfile.ZipFile, arcname: str, data: bytes, executable: bool = False):
    info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))  # fixed: reproducible wheels
    # A regular file's mode: pip makes a file executable only when the type bits say it is a regular file.
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    wheel.writestr(info, data)
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return arcname, f"sha256={digest}", len(data)


def _metadata_files():
    metadata = (f"Metadata-Version: 2.1\nName: {_PACKAGE}\nVersion: {_version()}\nSummary: {_SUMMARY}\n"
                f"Requires-Python: >=3.9\nRequires-Dist: numpy\n")
    wheel = (f"Wheel-Version: 1.0\nGenerator: gpumem_build_backend\nRoot-Is-Purelib: false\n"
             f"Tag: {_wheel_tag()}\n")
    entry_points = "[console_scripts]\n" + "".join(f"{name} = {target}\n" for name, target in _CONSOLE_SCRIPTS.items())
    return {"METADATA": metadata, "WHEEL": wheel, "entry_points.txt": entry_points}


def _dist_info_name() -> str:
    return f"{_PACKAGE}-{_version()}.dist-info"


def _python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def _wheel_tag() -> str:
    """``cpXY-cpXY-<platform>``: the module is built for this interpreter's ABI on this platform only."""
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{_python_tag()}-{_python_tag()}-{platform}"


# ---- the project --------------------------------------------------------------------------------------------

def _project_root() -> Path:
    """The checkout this backend belongs to: the nearest parent with gpumem's top-level CMakeLists.txt."""
    here = Path(__file__).resolve().parent
    for candidate in (here, *here.parents):
        cmakelists = candidate / "CMakeLists.txt"
        if cmakelists.is_file() and re.search(r"^project\(gpumem\s", cmakelists.read_text(encoding="utf-8"), re.M):
            return candidate
    raise RuntimeError(f"cannot find gpumem's top-level CMakeLists.txt above {here}: install from a checkout")


def _version() -> str:
    text = (_project_root() / "CMakeLists.txt").read_text(encoding="utf-8")
    match = re.search(r"^project\(gpumem\s+VERSION\s+([0-9][0-9.]*)", text, re.M)
    if match is None:
        raise RuntimeError("cannot read gpumem's version from the top-level CMakeLists.txt")
    return match.group(1)
