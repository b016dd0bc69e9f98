#!/usr/bin/env bash
# Sets up a fresh machine, builds the release preset and runs the whole test suite.
# Usage: scripts/test.sh [preset]   (release by default; debug-asan for ASan+UBSan, debug-tsan for TSan)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
./scripts/setup.sh
./scripts/format --check  # .clang-format decides; scripts/format rewrites what differs
cmake --preset "$preset" -DPLRT_WERROR=ON  # a warning fails the test command (CI's)
cmake --build --preset "$preset" -j "$(nproc)"
ctest --preset "$preset"
