#!/usr/bin/env bash
# Sets up a fresh machine, builds, and runs the main job: the sample MLP classifier trained with
# DistributedDataParallel on 2 CPU processes (plrun --strategy ddp --devices 2), on the built-in
# synthetic data.  Extra arguments go to plrt-mlp (e.g. --epochs 10, --data file.safetensors).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake --preset release
cmake --build --preset release -j "$(nproc)"
mkdir -p runs
cd runs
exec ../build/release/bin/plrun --accelerator cpu --strategy ddp --devices 2 -- \
  ../build/release/bin/plrt-mlp --epochs 5 --save mlp.safetensors "$@"
