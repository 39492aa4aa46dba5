"""`pip install ./python`: the PEP 517 backend (python/build_backend) builds a wheel that installs and imports,
and gives pip users the `gpumem` command (a console script and `python -m gpumem`, both running the C++
command-line tool shipped in the package) and `gpumem.__version__`, CMake's project version.

The wheel is built from the build tree these tests run from (reuse-build: no reconfiguration), so this
checks the packing, the metadata, the import of the installed copy and the command in a fresh virtual
environment; a from-scratch `pip install ./python` is run by scripts/gpu_check.sh on the GPU machine.
"""

import base64
import csv
import hashlib
import importlib.util
import io
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import gpumem
import gpumem._cli

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


# ---- the version ------------------------------------------------------------------------------------------


def cmake_project_version():
    match = re.search(r"^project\(gpumem\s+VERSION\s+([0-9][0-9.]*)", (ROOT / "CMakeLists.txt").read_text(), re.M)
    assert match, "no project(gpumem VERSION ...) in CMakeLists.txt"
    return match.group(1)


def test_the_version_is_cmakes_project_version():
    assert gpumem.__version__ == cmake_project_version()
    assert load_backend()._version() == gpumem.__version__  # the wheel's metadata says the same


# ---- the command --------------------------------------------------------------------------------------------


def test_the_console_script_is_declared_alike_in_both_pyprojects_and_the_backend():
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    for pyproject in (ROOT / "python" / "pyproject.toml", ROOT / "pyproject.toml"):
        scripts = tomllib.loads(pyproject.read_text())["project"]["scripts"]
        assert scripts == load_backend()._CONSOLE_SCRIPTS == {"gpumem": "gpumem._cli:main"}, pyproject


def test_the_wheel_has_the_command_line_tool_its_data_and_the_console_script(wheel):
    path, backend = wheel
    with zipfile.ZipFile(path) as z:
        mode = z.getinfo("gpumem/_bin/gpumem").external_attr >> 16
        assert stat.S_ISREG(mode) and mode & 0o111, f"the tool is not an executable file in the wheel: {mode:o}"
        assert "gpumem/_data/logs/thrust_pipeline.csv.gz" in z.namelist()
        entry_points = z.read(f"gpumem-{backend._version()}.dist-info/entry_points.txt").decode()
        assert entry_points == "[console_scripts]\ngpumem = gpumem._cli:main\n"


def test_demo_gets_the_bundled_log_unless_a_log_is_given():
    log = str(gpumem._cli.DEMO_LOG)
    assert gpumem._cli.DEMO_LOG.is_file(), "the build did not copy data/logs into the package"
    assert gpumem._cli.command_line(["demo"]) == ["gpumem", "demo", "--log", log]
    assert gpumem._cli.command_line(["demo", "--elements", "8"]) == ["gpumem", "demo", "--elements", "8", "--log", log]
    assert gpumem._cli.command_line(["demo", "--log", "mine.csv"]) == ["gpumem", "demo", "--log", "mine.csv"]
    assert gpumem._cli.command_line(["demo", "--log=mine.csv"]) == ["gpumem", "demo", "--log=mine.csv"]
    assert gpumem._cli.command_line(["replay", "demo"]) == ["gpumem", "replay", "demo"]
    assert gpumem._cli.command_line([]) == ["gpumem"]


def test_without_the_tool_the_command_says_so(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(gpumem._cli, "EXECUTABLE", tmp_path / "missing" / "gpumem")
    with pytest.raises(SystemExit) as exit_status:
        gpumem._cli.main(["info"])
    assert exit_status.value.code == 1
    assert "has no command-line tool" in capsys.readouterr().err


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh virtual environment as the install docs make it (seeing the system's packages: NumPy, pip),
    with the wheel installed into it by pip."""
    path, _ = wheel
    root = tmp_path_factory.mktemp("venv") / "v"
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(root)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"python -m venv does not work here: {made.stderr.strip()}")
    python = root / "bin" / "python"
    if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip("pip is not installed for this interpreter")
    installed = subprocess.run([python, "-m", "pip", "install", "--no-deps", "--no-index", str(path)],
                               capture_output=True, text=True)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return root


def run_in(venv, command, cwd):
    """`command` (its first word a program of the venv's bin/) on the host backend, with the venv's PATH."""
    environment = dict(os.environ, GPUMEM_BACKEND="host", PATH=f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    environment.pop("PYTHONPATH", None)  # the installed package, not the build tree
    return subprocess.run([str(venv / "bin" / command[0]), *command[1:]], env=environment, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_pip_installs_the_gpumem_command_and_it_runs_the_tool(venv, tmp_path):
    assert os.access(venv / "bin" / "gpumem", os.X_OK), "pip did not install the console script"
    shown = run_in(venv, ["gpumem", "--help"], tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert all(command in shown.stdout for command in ("info", "demo", "replay")), shown.stdout
    version = run_in(venv, ["gpumem", "--version"], tmp_path)
    assert version.returncode == 0 and gpumem.__version__ in version.stdout, version.stdout + version.stderr
    info = run_in(venv, ["gpumem", "info"], tmp_path)
    assert info.returncode == 0, info.stderr
    assert "backend" in info.stdout and "host" in info.stdout, info.stdout


def test_python_m_gpumem_runs_the_same_tool(venv, tmp_path):
    info = run_in(venv, ["python", "-m", "gpumem", "info"], tmp_path)
    assert info.returncode == 0, info.stderr
    assert "backend" in info.stdout and "host" in info.stdout, info.stdout
    version = run_in(venv, ["python", "-m", "gpumem", "--version"], tmp_path)
    assert version.stdout == run_in(venv, ["gpumem", "--version"], tmp_path).stdout


def test_exit_status_and_both_streams_are_the_tools_own(venv, tmp_path):
    located = run_in(venv, ["python", "-c", "import gpumem._cli as c; print(c.EXECUTABLE)"], tmp_path)
    tool = Path(located.stdout.strip())
    assert tool.is_relative_to(venv), tool  # the installed copy
    direct = subprocess.run([str(tool), "no-such-command"], capture_output=True, text=True, cwd=tmp_path,
                            env=dict(os.environ, GPUMEM_BACKEND="host"))
    assert direct.returncode != 0 and direct.stderr
    for command in (["gpumem", "no-such-command"], ["python", "-m", "gpumem", "no-such-command"]):
        through = run_in(venv, command, tmp_path)
        assert (through.returncode, through.stdout, through.stderr) == (direct.returncode, direct.stdout,
                                                                       direct.stderr), command


def test_demo_replays_the_log_installed_with_the_package(venv, tmp_path):
    located = run_in(venv, ["python", "-c", "import gpumem._cli as c; print(c.command_line(['demo'])[-1])"], tmp_path)
    log = Path(located.stdout.strip())
    assert log.is_relative_to(venv) and log.is_file(), located.stdout + located.stderr
    demo = run_in(venv, ["gpumem", "demo", "--elements", "4096", "--report", str(tmp_path / "demo.html")], tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert (tmp_path / "demo.html").is_file()
