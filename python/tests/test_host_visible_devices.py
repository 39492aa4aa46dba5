"""GPUMEM_HOST_VISIBLE_DEVICES, the host backend's CUDA_VISIBLE_DEVICES: which emulated devices a process
sees, in which order. The backend reads it once per process, so each case runs in a new interpreter."""

import json
import os
import subprocess
import sys

import pytest

_DEVICES = """
import json
import gpumem
names = [gpumem.cuda.Device(d).name for d in range(gpumem.cuda.get_device_count())]
print(json.dumps(names))
"""


def _run(script, **variables):
    """Runs `script` on the host backend with `variables` as the only GPUMEM_HOST_* settings."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("GPUMEM_HOST_")}
    env.update(GPUMEM_BACKEND="host", **variables)
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("devices, visible, names", [
    ("4", "1", ["gpumem host device 1"]),
    ("4", "3,0,2", ["gpumem host device 3", "gpumem host device 0", "gpumem host device 2"]),
    ("2", None, ["gpumem host device 0", "gpumem host device 1"]),
])
def test_a_process_sees_the_listed_emulated_devices_in_order_named_after_them(devices, visible, names):
    variables = dict(GPUMEM_HOST_DEVICES=devices)
    if visible is not None:
        variables["GPUMEM_HOST_VISIBLE_DEVICES"] = visible
    done = _run(_DEVICES, **variables)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == names


_FIRST_USE = """
import gpumem
try:
    gpumem.cuda.get_device_count()
except ValueError as error:
    print(error)
"""


def _empty_variables_reach_children():
    """Whether a variable set to the empty string reaches a child process. Under compute-sanitizer it does not:
    the sanitizer drops empty variables from the environment of every process it runs."""
    env = dict(os.environ, GPUMEM_PROBE_EMPTY="")
    done = subprocess.run([sys.executable, "-c", "import os; print('GPUMEM_PROBE_EMPTY' in os.environ)"], env=env,
                          capture_output=True, text=True, timeout=60)
    return done.stdout.strip() == "True"


@pytest.mark.parametrize("visible, words", [
    ("1", ["device ordinal from 0 to 0"]),  # one emulated device by default
    ("", ["empty entry"]),
    ("0,x", ['"x"']),
    ("0,0", ["device 0 twice"]),
])
def test_a_malformed_value_is_a_value_error_naming_the_variable_not_a_crash(visible, words):
    if visible == "" and not _empty_variables_reach_children():
        pytest.skip("empty environment variables do not reach child processes here (compute-sanitizer drops them)")
    done = _run(_FIRST_USE, GPUMEM_HOST_VISIBLE_DEVICES=visible)
    assert done.returncode == 0, done.stderr
    assert f'GPUMEM_HOST_VISIBLE_DEVICES="{visible}"' in done.stdout
    for word in words:
        assert word in done.stdout
