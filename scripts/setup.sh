#!/usr/bin/env bash
# Installs every Debian package plrt needs to build, test and benchmark.
# Idempotent and non-interactive: safe to run on a fresh machine or again on a set-up one.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  clang                    # libFuzzer targets and the C99 header check
  clang-format             # scripts/format (--check runs first in scripts/test.sh)
  libclang-rt-14-dev       # libFuzzer's runtime (only recommended by clang, so named here)
  libboost-dev             # Boost.DLL (header-only when BOOST_DLL_USE_STD_FS is set)
  libspdlog-dev libfmt-dev # logging
  nlohmann-json3-dev       # --list-plugins --json, --dry-run output
  libcli11-dev             # plrun's command line
  libdlpack-dev            # DLPack conversions in the SDK
  libgtest-dev libgmock-dev googletest  # tests
  libgloo-dev              # gloo process group
  libbenchmark-dev         # micro-benchmarks under bench/
  libopenblas-dev          # the cpu accelerator's gemm (cblas_sgemm/dgemm, openblas_set_num_threads)
  iproute2                 # ip netns, tc: scripts/netem-cluster and the multi-node tests (tests/cluster)
  python3                  # scripts/netem-cluster, bench/*.py
  openmpi-bin              # mpirun: tests/engines runs plrt-mlp under Open MPI (issue 14)
  python3-sklearn          # scripts/get-digits (the bundled digits for plrt-mlp --data); tests/sdk: metrics vs scikit-learn's
  python3-yaml             # tests/training/tfevents_check.py reads hparams.yaml
  python3-torch            # torchrun: tests/engines runs plrt-mlp under torchrun; torch_load_check.py
  libtorch-dev             # samples/libtorch (a torch::nn CNN synchronised by plrt) and its DDP reference test
  slurm-wlm munge          # tests/slurm: a one-node SLURM cluster (slurmctld, slurmd, srun, sbatch; munged)
  abigail-tools            # abidw, abidiff: the ABI check against abi/ (scripts/abi-check, ctest -L abi)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: all packages present"
fi
