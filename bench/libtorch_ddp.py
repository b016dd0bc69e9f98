#!/usr/bin/env python3
"""Training speed of samples/libtorch (plrt-libtorch: a libtorch CNN, conv 1-8, conv 8-16, linear
256-10 on 1x16x16 images, SGD with momentum, one CPU thread per rank) with its gradients averaged
by plrt's strategies (plrt::torch's DistributedDataParallel) under plrun, beside the same model and batches trained by PyTorch's own
DistributedDataParallel (gloo; samples/libtorch/torch_ddp_reference.py), in the same run.

    python3 bench/libtorch_ddp.py --build build/release [--steps 500] [--repeats 3] [--batch-size 32]

Both sides time the steps after --warmup on rank 0 (set-up and process start excluded), so the
ratio compares the training loops: libtorch's forward, backward and SGD are the same code on both
sides; the gradient synchronisation differs (plrt's ddp / bagua over plrt's gloo plugin, hooked on
each parameter's AccumulateGrad, against torch's Reducer over torch's gloo).  Also ddp_sharded
(reduce-scatter, then
the allgather of the values; torch's SGD still steps whole tensors, see the sample), horovod (its
fusion thread negotiating every cycle; its learning rate x2 changes nothing of the speed), and
pl::torch::ZeroRedundancyOptimizer (--zero: each rank steps its partition; the values broadcast
from their owners under ddp, gathered by the strategy under ddp_sharded).  A wide model (the CNN
with a flat-W-W-10 head, 20.5 M parameters) makes the step communication-bound; both sides run it
with --wide-steps steps.
It prints the median steps/s of each and their ratio.  The sample must be built (libtorch-dev).

On a GPU (scripts/gpu-check, against that machine's CUDA torch): --accelerator cuda --worlds 1
--sample <plrt-libtorch built there> --plrun <bundle's plrun> --plrt-library-path <bundle deps>
--variants cnn:ddp,wide:ddp; PyTorch's side then runs on the same GPU (at 1 rank, its plain loop).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "samples", "libtorch", "torch_ddp_reference.py")


def run_plrt(build, world, strategy, a, extra=(), steps=None):
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [a.plrun, "--accelerator", a.accelerator, "--strategy", strategy, "--devices",
               str(world), "--", a.sample, "--steps", str(steps or a.steps), "--warmup",
               str(a.warmup), "--batch-size", str(a.batch_size), "--report", report, *extra]
        env = dict(os.environ, PL_LOG_LEVEL="warn", OMP_NUM_THREADS="1")
        if a.plrt_library_path:
            env["LD_LIBRARY_PATH"] = a.plrt_library_path
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        with open(report) as f:
            return json.load(f)["steps_per_s"]


def run_torch(python, world, a, width=0, steps=None):
    cmd = [python, REFERENCE, "--world", str(world), "--steps", str(steps or a.steps), "--warmup", str(a.warmup),
           "--batch-size", str(a.batch_size), "--width", str(width), "--device", a.accelerator,
           "--backend", "nccl" if a.accelerator == "cuda" else "gloo"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, check=True, env=env, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["steps_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(HERE, "..", "build", "release"))
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--worlds", default="2")
    p.add_argument("--wide-width", type=int, default=4400)
    p.add_argument("--wide-steps", type=int, default=60)
    p.add_argument("--python", default="/usr/bin/python3", help="a Python with torch (Debian's python3-torch)")
    p.add_argument("--accelerator", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--sample", help="plrt-libtorch (default: BUILD/bin/plrt-libtorch)")
    p.add_argument("--plrun", help="plrun (default: BUILD/bin/plrun)")
    p.add_argument("--plrt-library-path", default="", help="LD_LIBRARY_PATH for plrt's programs (a GPU bundle's deps)")
    p.add_argument("--variants", default="", help="model:strategy[+zero],... (default: every row)")
    a = p.parse_args()
    if min(a.steps, a.wide_steps) <= a.warmup:
        print(f"libtorch_ddp.py: --steps {a.steps} and --wide-steps {a.wide_steps} must exceed --warmup {a.warmup}",
              file=sys.stderr)
        sys.exit(2)
    a.sample = a.sample or os.path.join(a.build, "bin", "plrt-libtorch")
    a.plrun = a.plrun or os.path.join(a.build, "bin", "plrun")
    if not os.path.exists(a.sample):
        sys.exit(f"{a.sample} is missing: install libtorch-dev (scripts/setup.sh) and rebuild")
    if subprocess.run([a.python, "-c", "import torch"], capture_output=True).returncode != 0:
        sys.exit(f"{a.python} cannot import torch (apt-get install python3-torch)")
    # (name, model width, plrt strategy, the sample's extra flags); the wide model (flat-W-W-10,
    # 20.5 M parameters at W=4400) makes the step communication-bound: 82 MB of gradients a step
    wide = ("--width", str(a.wide_width))
    variants = [("cnn", 0, "ddp", ()), ("cnn", 0, "ddp", ("--zero",)), ("cnn", 0, "bagua", ()),
                ("cnn", 0, "ddp_sharded", ()), ("cnn", 0, "ddp_sharded", ("--zero",)), ("cnn", 0, "horovod", ()),
                ("wide", a.wide_width, "ddp", wide), ("wide", a.wide_width, "ddp", wide + ("--zero",)),
                ("wide", a.wide_width, "ddp_sharded", wide + ("--zero",))]
    if a.variants:
        wanted = a.variants.split(",")
        known = [f"{m}:{s}{'+zero' if '--zero' in e else ''}" for m, _, s, e in variants]
        bad = [w for w in wanted if w not in known]
        if bad:
            print(f"libtorch_ddp.py: unknown --variants {bad}; known: {','.join(known)}", file=sys.stderr)
            sys.exit(2)
        variants = [v for v, k in zip(variants, known) if k in wanted]
    print(f"{'ranks':>5} {'model':<5} {'plrt strategy':<20} {'plrt steps/s':>13} {'torch DDP steps/s':>18} {'ratio':>6}")
    for world in [int(w) for w in a.worlds.split(",")]:
        models = {m for m, _, _, _ in variants}
        torch = {"cnn": [], "wide": []}
        plrt = {k: [] for k in range(len(variants))}
        for _ in range(a.repeats):  # alternated, so a slow spell of a shared machine hits both
            if "cnn" in models:
                torch["cnn"].append(run_torch(a.python, world, a))
            if "wide" in models:
                torch["wide"].append(run_torch(a.python, world, a, a.wide_width, a.wide_steps))
            for k, (model, _, strategy, extra) in enumerate(variants):
                plrt[k].append(run_plrt(a.build, world, strategy, a, extra, a.wide_steps if model == "wide" else None))
        for k, (model, _, strategy, extra) in enumerate(variants):
            ts = statistics.median(torch[model])
            ps = statistics.median(plrt[k])
            name = strategy + (" + zero" if "--zero" in extra else "")
            ratio = f"{ps / ts:>6.2f}" if ts > 0 else "   n/a"  # no timed steps (--steps <= --warmup)
            print(f"{world:>5} {model:<5} {name:<20} {ps:>13.1f} {ts:>18.1f} {ratio}", flush=True)

if __name__ == "__main__":
    main()
