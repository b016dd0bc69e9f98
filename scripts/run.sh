#!/usr/bin/env bash
# Sets up a fresh machine, builds, and runs the main job.  Until the training issue lands the main
# job is plrun's first face: list the plugins, then resolve a job's configuration (--dry-run).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake --preset release
cmake --build --preset release -j "$(nproc)"
./build/release/bin/plrun --list-plugins
./build/release/bin/plrun --dry-run --accelerator cpu --devices 1 --precision bf16 -- ./train
