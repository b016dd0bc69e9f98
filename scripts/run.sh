#!/usr/bin/env bash
# Sets up a fresh machine for the main job alone, builds it, and runs it: the sample MLP classifier
# trained with DistributedDataParallel on 2 CPU processes (plrun --strategy ddp --devices 2), on the
# built-in synthetic data.  Extra arguments go to plrt-mlp (e.g. --epochs 10, --data file.safetensors).
#
# Only what the main job needs: the packages of `scripts/setup.sh --main` and CMake preset "main"
# (the runtime, the cpu plugins, plrun and the samples in build/main; no tests, benchmarks, CUDA or
# libtorch, as a unity build).  scripts/test.sh installs and builds everything (build/release).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --main
cmake --preset main >/dev/null
# plrun and plrt-mlp first: the sample's long compile then overlaps the SDK's instead of running
# alone at the end (measured: about 15 s of 2 cores' build); then the plugins.
cmake --build --preset main -j "$(nproc)" --target plrun plrt-mlp
cmake --build --preset main -j "$(nproc)"
# The defaults, unless the arguments give their own (a flag given twice is an error in plrt-mlp).
epochs=(--epochs 5)
save=(--save mlp.safetensors)
for a in "$@"; do
  case "$a" in
    --epochs | --epochs=*) epochs=() ;;
    --save | --save=*) save=() ;;
  esac
done
mkdir -p runs
cd runs
exec ../build/main/bin/plrun --accelerator cpu --strategy ddp --devices 2 -- \
  ../build/main/bin/plrt-mlp "${epochs[@]}" "${save[@]}" "$@"
