#!/usr/bin/env bash
# Builds llama.cpp's own `llama-server` and `llama-bench` (the anchors of the peer bench) from the
# llama.cpp tree vendored in the `llama-cpp-python` source package, into a cache directory.
#
# Usage: benches/peer/build-llama-server.sh [CACHE_DIR]
#   CACHE_DIR defaults to $LLAMA_SERVER_CACHE, else ~/.cache/llamay-peer.
# Prints the path of the llama-server binary on its last line. Does nothing when it is already
# built. Takes ~12 minutes on 2 cores (nice'd). Nothing it builds belongs in the repository.
set -euo pipefail

version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
cache="${1:-${LLAMA_SERVER_CACHE:-$HOME/.cache/llamay-peer}}"
build="$cache/build-$version"
server="$build/bin/llama-server"

if [ -x "$server" ] && [ -x "$build/bin/llama-bench" ]; then
  echo "$server"
  exit 0
fi

command -v cmake >/dev/null || { echo "cmake is missing (apt-get install -y cmake)" >&2; exit 1; }
command -v pip >/dev/null || { echo "pip is missing" >&2; exit 1; }
mkdir -p "$cache"

src="$cache/llama_cpp_python-$version"
if [ ! -d "$src/vendor/llama.cpp" ]; then
  echo "downloading llama-cpp-python $version (source package)" >&2
  pip download --quiet --no-deps --no-binary :all: --dest "$cache" "llama-cpp-python==$version"
  tar -xzf "$cache/llama_cpp_python-$version.tar.gz" -C "$cache"
fi

jobs="${BUILD_JOBS:-$(nproc)}"
# As llamay's own build (.cargo/config.toml): native, but without the AMX kernels that fault on
# these virtual machines.
no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
echo "configuring llama.cpp in $build" >&2
cmake -S "$src/vendor/llama.cpp" -B "$build" \
  -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" >&2
echo "building llama-server and llama-bench with $jobs jobs (about 12 minutes on 2 cores)" >&2
nice -n 10 cmake --build "$build" --config Release -j "$jobs" --target llama-server llama-bench >&2
echo "$server"
