#!/usr/bin/env bash
# Installs the Debian packages plrt needs.  Idempotent and non-interactive: safe to run on a fresh
# machine or again on a set-up one.
#   scripts/setup.sh           everything: build, tests, benchmarks (scripts/test.sh)
#   scripts/setup.sh --main    the main job alone: the runtime, the cpu plugins, plrun and plrt-mlp
#                              (CMake preset "main"; scripts/run.sh)
#   scripts/setup.sh --list [--main]   prints the package names, one per line, and installs nothing
# tests/install/check_main_job.sh checks that the --main list is enough for preset "main" (every
# header and library that build reads belongs to one of these packages or their dependencies).
set -euo pipefail

# The main job: compilers and build tools, and the libraries of the runtime, the SDK, plrun and the
# cpu plugins.
main_packages=(
  build-essential cmake ninja-build pkg-config
  libboost-dev             # Boost.DLL (header-only when BOOST_DLL_USE_STD_FS is set), Boost.CRC, Boost.UUID
  libspdlog-dev libfmt-dev # logging
  nlohmann-json3-dev       # --list-plugins --json, --dry-run output, checkpoints' trainer.json
  libcli11-dev             # plrun's and plrt-mlp's command lines
  libdlpack-dev            # DLPack conversions in the SDK
  libgloo-dev              # gloo process group
  libopenblas-dev          # the cpu accelerator's gemm (cblas_sgemm/dgemm, openblas_set_num_threads)
)

# Everything else: tests, benchmarks, tools and the launchers the tests run.
test_packages=(
  git
  clang                    # libFuzzer targets and the C99 header check
  clang-format             # scripts/format (--check runs first in scripts/test.sh)
  libclang-rt-14-dev       # libFuzzer's runtime (only recommended by clang, so named here)
  libgtest-dev libgmock-dev googletest  # tests
  libbenchmark-dev         # micro-benchmarks under bench/
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

main_only=0
list=0
for arg in "$@"; do
  case "$arg" in
    --main) main_only=1 ;;
    --list) list=1 ;;
    *)
      echo "setup.sh: unknown argument '$arg'; valid: --main, --list" >&2
      exit 2
      ;;
  esac
done

packages=("${main_packages[@]}")
((main_only)) || packages+=("${test_packages[@]}")

if ((list)); then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

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
