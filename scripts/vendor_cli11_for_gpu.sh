#!/usr/bin/env bash
# Copies the installed CLI11 (header-only: its headers and its CMake package config, e.g. Debian's
# libcli11-dev) into .deps/cli11/ of the source tree, for machines that have no CLI11 and no network.
# Carry .deps/ to such a machine with the working tree: cli/CMakeLists.txt looks there after the standard
# places, and scripts/setup_deps.sh counts the copy as the package.
#
#   bash scripts/vendor_cli11_for_gpu.sh [PREFIX]   # PREFIX: where CLI11 is installed (default /usr)
set -euo pipefail

prefix=${1:-/usr}
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.deps/cli11

config=
for dir in "$prefix/share/cmake/CLI11" "$prefix"/lib/*/cmake/CLI11 "$prefix/lib/cmake/CLI11"; do
  [[ -f $dir/CLI11Config.cmake ]] && { config=$dir; break; }
done
[[ -n $config && -f $prefix/include/CLI/CLI.hpp ]] ||
  { echo "vendor_cli11_for_gpu: no CLI11 under $prefix (install libcli11-dev)" >&2; exit 1; }

rm -rf "$dest"
mkdir -p "$dest/include" "$dest/share/cmake"
cp -r "$prefix/include/CLI" "$dest/include/"
cp -r "$config" "$dest/share/cmake/CLI11"
# A config that names its headers by absolute path would point back at this machine: make it relative.
sed -i "s|$prefix/include|\${CMAKE_CURRENT_LIST_DIR}/../../../include|g" "$dest"/share/cmake/CLI11/*.cmake
echo "vendor_cli11_for_gpu: CLI11 from $prefix in $dest (cmake: -DCLI11_DIR=$dest/share/cmake/CLI11)"
