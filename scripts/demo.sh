#!/usr/bin/env bash
# The main job: builds the `gpumem` command (release preset) and runs `gpumem info` and `gpumem demo`.
# The backend is chosen as always: the GPU when one is present, otherwise the host backend
# (GPUMEM_BACKEND=cuda|host overrides).
#
#   bash scripts/demo.sh
#   GPUMEM_JOBS=8 bash scripts/demo.sh   # parallelism (default: the number of cores)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${GPUMEM_JOBS:-$(nproc 2>/dev/null || echo 2)}

bash scripts/setup_deps.sh
cmake --preset release
cmake --build --preset release --parallel "$jobs" --target gpumem_cli

gpumem=build/release/cli/gpumem
printf '\n$ gpumem info\n'
"$gpumem" info
printf '\n$ gpumem demo\n'
"$gpumem" demo   # writes gpumem-demo-report.html here: open it in a browser
