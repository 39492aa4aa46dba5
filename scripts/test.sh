#!/usr/bin/env bash
# Builds everything and runs every test: the README's test command, and what CI runs (.ci/run).
#
#   bash scripts/test.sh                              # deps; the `thread-safety` preset (builds only), the
#                                                     # `ci` preset (warnings are errors), then the `asan`
#                                                     # (ASan + UBSan) and `tsan` presets: what CI runs
#   GPUMEM_TEST_SANITIZERS=0 bash scripts/test.sh     # no sanitizer presets (quick local run)
#   GPUMEM_TEST_SANITIZERS=asan bash scripts/test.sh  # `ci`, then `asan`
#   GPUMEM_JOBS=8 bash scripts/test.sh                # parallelism (default: the number of cores)
#
# Exits non-zero on any failure. Tests labelled `gpu` are reported as skipped on a machine with no GPU.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=${GPUMEM_JOBS:-$(nproc 2>/dev/null || echo 2)}
start=$SECONDS

step() { printf '\n==== %s\n' "$*"; }

# The tests need Chromium too (report.chromium renders a `gpumem report` page); here it must be present, so
# the test fails rather than skips without it.
# The `ci` preset also builds the Python package and runs its pytest suite (python.pytest).
# clang: the `thread-safety` preset's compiler.
GPUMEM_DEPS_TESTS=1 GPUMEM_DEPS_PYTHON=1 GPUMEM_DEPS_EXTRA="clang ${GPUMEM_DEPS_EXTRA:-}" bash scripts/setup_deps.sh
export GPUMEM_REQUIRE_CHROMIUM=1

# run_preset NAME: configure, build and test one preset; ctest prints every test and the closing summary.
run_preset() {
  local preset=$1
  step "configure ($preset)"
  cmake --preset "$preset"
  step "build ($preset, $jobs jobs)"
  cmake --build --preset "$preset" --parallel "$jobs"
  step "test ($preset)"
  ctest --preset "$preset" --parallel "$jobs"
}

# clang's thread-safety analysis: a compile-time check of the GPUMEM_GUARDED_BY / GPUMEM_REQUIRES
# annotations (include/gpumem/detail/thread_annotations.hpp). Nothing to run: a finding fails the build.
# Debian 12's clang 14 with libstdc++ 12 needs two aids, both in the preset: a stand-in for
# std::source_location (cmake/clang_source_location.hpp) and -fsized-deallocation.
step "configure + build (thread-safety: clang -Wthread-safety, the library only)"
cmake --preset thread-safety
cmake --build --preset thread-safety --parallel "$jobs"

run_preset ci

case ${GPUMEM_TEST_SANITIZERS:-all} in
  0 | "") ;;
  1 | asan) run_preset asan ;;
  all) run_preset asan; run_preset tsan ;;
  *) echo "test.sh: GPUMEM_TEST_SANITIZERS must be 0, 1 (asan), asan or all" >&2; exit 2 ;;
esac

step "all tests passed ($((SECONDS - start)) s)"
