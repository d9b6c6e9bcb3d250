#!/usr/bin/env bash
# Builds the two demo examples and runs them: consumer_producers as real processes
# (--launch=local_mp), then hello_world. Fails when either program fails.
set -euo pipefail

cd "$(dirname "$0")/.."
bash tools/install-deps.sh

cmake -S . -B build/demo -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTLAUNCH_BUILD_TESTS=OFF -DTLAUNCH_BUILD_BENCHMARKS=OFF
cmake --build build/demo -j "${JOBS:-$(nproc)}" --target hello_world consumer_producers

# timeout: a demo that hangs must fail, not block the caller.
echo
echo "=== build/demo/examples/consumer_producers --launch=local_mp"
timeout 300 build/demo/examples/consumer_producers --launch=local_mp
echo
echo "=== build/demo/examples/hello_world"
timeout 300 build/demo/examples/hello_world
echo
echo "demo: both programs finished successfully"
