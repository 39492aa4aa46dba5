#!/usr/bin/env bash
# Copies Dask and Distributed, and the pure-Python packages they need that the GPU machine's image lacks, from
# this machine's Debian packages (python3-dask, python3-distributed: GPUMEM_DEPS_PYTHON=1 bash
# scripts/setup_deps.sh installs them) into .deps/python/ of the source tree, for a GPU machine that has no
# network. Carry .deps/ with the working tree: scripts/gpu_check.sh puts .deps/python on the Python tests'
# PYTHONPATH when it exists, so that test_dask.py and test_dask_devices.py run there instead of skipping.
#
# Debian's Dask (2022.12) predates NumPy 2, which the GPU image has: the copy gets the few edits that make
# the parts the tests use run on it, and its NVML monitor gets one for the nvidia-ml-py there (each edit is
# checked; a source that no longer matches stops the script).
#
#   bash scripts/carry_dask_for_gpu.sh [SITE]   # SITE: where the packages are (default /usr/lib/python3/dist-packages)
set -euo pipefail

site=${1:-/usr/lib/python3/dist-packages}
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.deps/python

# What distributed and dask import that the GPU image does not have (its own click, cloudpickle, fsspec,
# jinja2, msgpack, packaging, psutil, pyyaml, sortedcontainers, toolz and urllib3 are newer and are used).
packages=(dask distributed partd locket tblib tornado zict heapdict.py)
for p in "${packages[@]}"; do
  [[ -e $site/$p ]] || { echo "carry_dask_for_gpu: $site/$p missing (install python3-dask python3-distributed)" >&2; exit 1; }
done

rm -rf "$dest"
mkdir -p "$dest"
for p in "${packages[@]}"; do
  cp -r "$site/$p" "$dest/"
done
# Compiled modules are for this machine's Python; every one of these packages runs without them.
find "$dest" \( -name '*.so' -o -name '__pycache__' \) -prune -exec rm -rf {} +
rm -rf "$dest"/dask/tests "$dest"/dask/*/tests "$dest"/distributed/tests "$dest"/distributed/*/tests

python3 - "$dest" <<'EOF'
import pathlib, sys

dest = pathlib.Path(sys.argv[1])
# (file, old, new): NumPy 2 removed numpy.compat, np.round_, np.in1d, np.AxisError, np.core and copy=False's
# "copy if needed" meaning (0x02 is NumPy's NPY_LIST_PICKLE flag).
edits = [
    ("dask/array/einsumfuncs.py", "from numpy.compat import basestring", "basestring = str"),
    ("dask/array/routines.py", "@implements(np.round, np.round_)", "@implements(np.round)"),
    ("dask/array/routines.py", "np.in1d(", "np.isin("),
    ("dask/array/numpy_compat.py", "np.core.numeric.normalize_axis_", "np.lib.array_utils.normalize_axis_"),
    ("dask/array/numpy_compat.py", "from numpy.core.numeric import normalize_axis_tuple",
     "from numpy.lib.array_utils import normalize_axis_tuple"),
    ("dask/array/numpy_compat.py", "np.array(x, copy=False, subok=subok)", "np.array(x, copy=None, subok=subok)"),
    ("dask/array/overlap.py", "from numpy.core.numeric import normalize_axis_tuple",
     "from numpy.lib.array_utils import normalize_axis_tuple"),
    ("dask/array/creation.py", "np.AxisError", "np.exceptions.AxisError"),
    ("dask/array/utils.py", "np.AxisError", "np.exceptions.AxisError"),
    ("distributed/protocol/numpy.py", "np.core.multiarray.LIST_PICKLE", "0x02"),
    # nvidia-ml-py returns str where the pynvml of 2022 returned bytes.
    ("distributed/diagnostics/nvml.py", "pynvml.nvmlSystemGetDriverVersion().decode()",
     "_text(pynvml.nvmlSystemGetDriverVersion())"),
    ("distributed/diagnostics/nvml.py", "pynvml.nvmlDeviceGetName(h).decode()", "_text(pynvml.nvmlDeviceGetName(h))"),
    ("distributed/diagnostics/nvml.py", "\nimport dask\n",
     "\nimport dask\n\n\ndef _text(value):\n    return value.decode() if isinstance(value, bytes) else value\n"),
]
for name, old, new in edits:
    path = dest / name
    text = path.read_text()
    if old not in text:
        sys.exit(f"carry_dask_for_gpu: {name} has no {old!r}: this Dask is not the one these edits are for")
    text = text.replace(old, new)
    compile(text, str(path), "exec")  # an edit that breaks the syntax stops here, not on the GPU machine
    path.write_text(text)
EOF

echo "carry_dask_for_gpu: $(du -sh "$dest" | cut -f1) in $dest (carry .deps; scripts/gpu_check.sh uses it)"
