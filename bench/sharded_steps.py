#!/usr/bin/env python3
"""ddp_sharded (ZeRO stage 1 and 2) beside ddp in the same run: steps/s and this rank's optimizer
state, gradient and bucket memory, on the sample model and on a wider one.

    python3 bench/sharded_steps.py --build build/release [--steps 200] [--repeats 3] [--worlds 2,4]

For every model and world size it runs ddp, ddp_sharded stage=1 and stage=2 (plrun, cpu, gloo, Adam,
batch 64 per rank) alternately, --repeats times, and prints the median steps/s of each, its ratio to
ddp's (the target: sharded step time <= 1.1x ddp's, i.e. a ratio >= 0.91), and rank 0's
optimizer_state_bytes (Trainer::optimizer_state_bytes), grad_bytes (the averaged gradient the
strategy keeps for the step) and comm_buffer_bytes (its bucket buffers) against ddp's.  Steps/s
covers the whole of fit, set-up included.  On a 2-core machine 4 ranks oversubscribe the cores:
read those rows for memory, not speed.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

MODELS = {"sample": ("784", "256,128", "10"), "wide": ("784", "4096,4096", "10")}
SIDES = [("ddp", []), ("sharded-1", ["--strategy-option", "stage=1"]), ("sharded-2", ["--strategy-option", "stage=2"])]


def run(build, world, steps, model, side):
    features, hidden, classes = MODELS[model]
    strategy = "ddp" if side[0] == "ddp" else "ddp_sharded"
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [os.path.join(build, "bin", "plrun"), "--accelerator", "cpu", "--strategy", strategy, "--devices",
               str(world)] + side[1] + ["--", os.path.join(build, "bin", "plrt-mlp"), "--features", features,
               "--hidden", hidden, "--classes", classes, "--batch-size", "64", "--optimizer", "adam", "--lr", "0.001",
               "--samples", str(64 * world * 50), "--heldout", "0", "--no-checkpoint", "--max-steps", str(steps),
               "--epochs", "100000", "--root-dir", tmp, "--report", report]
        env = dict(os.environ, PL_LOG_LEVEL="warn", OPENBLAS_NUM_THREADS="1")
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        with open(report) as f:
            return json.load(f)


def mib(x):
    return "%.2f" % (x / 1048576.0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--models", default="sample,wide")
    a = ap.parse_args()
    print("| model | W | strategy | steps/s | vs ddp | optimizer state MiB (vs ddp) | grad MiB | bucket buffers MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for model in a.models.split(","):
        for world in [int(w) for w in a.worlds.split(",")]:
            speed = {s[0]: [] for s in SIDES}
            last = {}
            for _ in range(a.repeats):
                for side in SIDES:
                    r = run(a.build, world, a.steps, model, side)
                    speed[side[0]].append(r["steps"] / r["seconds"])
                    last[side[0]] = r
            base = statistics.median(speed["ddp"])
            base_state = last["ddp"]["optimizer_state_bytes"]
            for name, _ in SIDES:
                r = last[name]
                st = r.get("strategy_stats", {})
                sps = statistics.median(speed[name])
                state = r["optimizer_state_bytes"]
                grad = st.get("grad_bytes", st.get("bucket_bytes", 0))
                buffers = st.get("comm_buffer_bytes", st.get("bucket_bytes", 0))
                print("| %s | %d | %s | %.1f | %.2fx | %s (%.3f) | %s | %s |" %
                      (model, world, name, sps, sps / base, mib(state), state / base_state if base_state else 0,
                       mib(grad), mib(buffers)))


if __name__ == "__main__":
    main()
