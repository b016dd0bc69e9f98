#!/usr/bin/env python3
"""Training speed of the sample (plrt-mlp: 784 inputs, hidden 256, 10 classes, batch 64 per rank,
SGD) at 1 and 2 ranks, beside PyTorch DDP on the same model and batch in the same run.

    python3 bench/mlp_steps.py --build build/release [--steps 2000] [--repeats 3]

For each world size it runs plrt (plrun --strategy ddp, gloo) and PyTorch (torch_mlp_ddp.py, gloo,
one thread per rank) alternately, --repeats times, and prints the median steps/s of each, their
ratio, and for plrt the share of allreduce time hidden behind backward (ddp's exposed_allreduce_ms
against allreduce_ms).  plrt's time is the whole of fit (set-up included); PyTorch's excludes its
warm-up, so the ratio is conservative for plrt.  PyTorch comes from Debian's python3-torch
(apt-get install python3-torch); without it only plrt's figures are printed.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def plrt_report(build, world, steps, hidden, strategy="ddp", plrun_flags=()):
    """plrt-mlp on `world` cpu ranks under plrun --strategy `strategy` `plrun_flags`: its --report."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [os.path.join(build, "bin", "plrun"), "--accelerator", "cpu", "--strategy", strategy, "--devices",
               str(world), *plrun_flags, "--", os.path.join(build, "bin", "plrt-mlp"), "--features", "784", "--hidden",
               hidden, "--classes", "10", "--batch-size", "64", "--optimizer", "sgd", "--samples", str(64 * world * 200),
               "--heldout", "0", "--no-checkpoint", "--max-steps", str(steps), "--epochs", "100000", "--root-dir", tmp,
               "--report", report]
        env = dict(os.environ, PL_LOG_LEVEL="warn", OPENBLAS_NUM_THREADS="1")
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        with open(report) as f:
            return json.load(f)


def run_plrt(build, world, steps, hidden):
    r = plrt_report(build, world, steps, hidden)
    st = r.get("strategy_stats", {})
    hidden_share = None
    if st.get("allreduce_ms"):
        hidden_share = max(0.0, 1.0 - st.get("exposed_allreduce_ms", 0.0) / st["allreduce_ms"])
    return r["steps"] / r["seconds"], hidden_share


def run_torch(python, world, steps, hidden):
    cmd = [python, os.path.join(HERE, "torch_mlp_ddp.py"), "--world", str(world), "--steps", str(steps),
           "--hidden", hidden]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, check=True, env=env, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["steps_per_s"]


def has_torch(python):
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


def parse_args(doc, steps):
    """The command line mlp_steps.py and horovod_steps.py share; also says whether torch imports."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(HERE, "..", "build", "release"))
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--worlds", default="1,2")
    p.add_argument("--hidden", default="256")
    p.add_argument("--python", default="/usr/bin/python3", help="a Python with torch (Debian's python3-torch)")
    a = p.parse_args()
    torch_ok = has_torch(a.python)
    if not torch_ok:
        print(f"note: {a.python} cannot import torch (apt-get install python3-torch); plrt only", file=sys.stderr)
    return a, torch_ok


def main():
    a, torch_ok = parse_args(__doc__, 2000)
    print(f"{'ranks':>5} {'plrt steps/s':>13} {'torch steps/s':>14} {'ratio':>6} {'allreduce hidden':>17}")
    for world in [int(w) for w in a.worlds.split(",")]:
        plrt, torch, hidden = [], [], []
        for _ in range(a.repeats):
            s, h = run_plrt(a.build, world, a.steps, a.hidden)
            plrt.append(s)
            if h is not None:
                hidden.append(h)
            if torch_ok:
                torch.append(run_torch(a.python, world, a.steps, a.hidden))
        ps = statistics.median(plrt)
        ts = statistics.median(torch) if torch else float("nan")
        hs = f"{100 * statistics.median(hidden):.0f}%" if hidden else "-"
        print(f"{world:>5} {ps:>13.1f} {ts:>14.1f} {ps / ts:>6.2f} {hs:>17}", flush=True)


if __name__ == "__main__":
    main()
