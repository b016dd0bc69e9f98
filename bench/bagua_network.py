#!/usr/bin/env python3
"""bagua's algorithms beside ddp on an emulated two-node link, in the same run: steps/s, the bytes
each node put on the wire per step, and held-out accuracy after a fixed number of steps.

    sudo python3 bench/bagua_network.py --build build/release [--rate 1gbit] [--steps 30] [--repeats 2]
                                        [--devices 2] [--only bytegrad,...]

Two network namespaces joined by a veth pair, each side shaped with tc (tbf) to --rate
(scripts/netem-cluster; its delay needs the netem qdisc, which some kernels lack: the script says
so).  `plrun --num-nodes 2` runs one process per namespace, so every collective crosses the
shaped link.  With --devices N > 1 each node runs N processes and every bagua algorithm runs twice:
hierarchical (the default on several nodes: reduce inside the node, the algorithm among the two
leaders, broadcast inside the node) and "(flat)" with hierarchical=false (every rank in the
algorithm).  The model is comm-bound: plrt-mlp 784-2048-2048-10 (5.8 M parameters, 23 MB of f32
gradient), batch 32 per rank, synthetic data, cpu.  Per configuration: a fresh cluster; the bytes
are the tbf counters of both sides summed over the run (set-up and store traffic included) and
divided by the steps; steps/s covers the whole fit (set-up included).  Ratios are to ddp's in the
same run.  Needs root (ip netns, tc); exits 77 where the machine refuses.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# name, strategy, strategy options, optimizer arguments (one epoch of --steps steps: the training
# set is 64 * devices * steps samples, 32 per rank per step; 20% more are held out)
CONFIGS = [
    ("ddp", "ddp", [], ["--optimizer", "sgd", "--lr", "0.05"]),
    ("gradient_allreduce", "bagua", [], ["--optimizer", "sgd", "--lr", "0.05"]),
    ("bytegrad", "bagua_bytegrad", [], ["--optimizer", "sgd", "--lr", "0.05"]),
    ("decentralized", "bagua_decentralized", [], ["--optimizer", "sgd", "--lr", "0.05"]),
    ("low_precision_decentralized", "bagua_low_precision_decentralized", [], ["--optimizer", "sgd", "--lr", "0.05"]),
    ("async", "bagua_async", ["sync_interval_ms=100"], ["--optimizer", "sgd", "--lr", "0.05"]),
    # QAdam freezes v after its warmup: the compressed m's rounding noise divided by a tiny frozen
    # sqrt(v) (units that hardly fired in the warmup) makes large steps, and at lr 1e-3 this model
    # diverges (Bagua's QAdam alike).  lr 1e-4 and a 20-step warmup train; the row runs 20 steps more.
    ("qadam", "bagua_qadam", [], ["--optimizer", "qadam", "--lr", "0.0001", "--warmup-steps", "20"]),
]
EXTRA_STEPS = {"qadam": 20}


def netem(*args, check=True):
    return subprocess.run([os.path.join("scripts", "netem-cluster")] + list(args), check=check,
                          capture_output=True, text=True)


def run(build, prefix, rate, steps, devices, config):
    name, strategy, options, optim = config
    steps += EXTRA_STEPS.get(name.split(" ")[0], 0)
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        netem("up", "--prefix", prefix, "--rate", rate)
        try:
            flags = ["--accelerator", "cpu", "--strategy", strategy, "--devices", str(devices)]
            for o in options:
                flags += ["--strategy-option", o]
            program = [os.path.join(build, "bin", "plrt-mlp"), "--features", "784", "--hidden", "2048,2048",
                       "--classes", "10", "--batch-size", "32", "--samples", str(80 * devices * steps), "--heldout", "0.2",
                       "--no-checkpoint", "--epochs", "1", "--root-dir", tmp,
                       "--report", report] + optim
            job = netem("job", "--prefix", prefix, "--timeout", "600", "--plrun", os.path.join(build, "bin", "plrun"),
                        "--", *flags, "--", *program, check=False)
            if job.returncode != 0:
                tail = (job.stdout + job.stderr).strip().splitlines()[-3:]
                return {"error": " / ".join(tail)}
            info = json.loads(netem("info", "--prefix", prefix).stdout)
        finally:
            netem("down", "--prefix", prefix, check=False)
        with open(report) as f:
            rep = json.load(f)
    wire = sum(n["tbf_bytes"] for n in info["nodes"])
    return {"steps_per_s": rep["steps"] / rep["seconds"], "wire_bytes_per_step": wire / rep["steps"] / 2,
            "bytes_per_step": rep.get("strategy_stats", {}).get("bytes_per_step"),
            "accuracy": rep["metrics"].get("val_acc"), "delay_applied": info["nodes"][0]["delay_applied"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--devices", type=int, default=1, help="processes per node (> 1: hierarchical and flat rows)")
    ap.add_argument("--only", default="", help="comma-separated configuration names (default: all)")
    a = ap.parse_args()
    check = netem("check", check=False)
    if check.returncode != 0:
        print("bagua_network: skipped: " + (check.stdout + check.stderr).strip())
        return 77
    configs = [c for c in CONFIGS if not a.only or c[0] in a.only.split(",")]
    if a.devices > 1:  # each bagua row twice: hierarchical (the default on two nodes), and flat
        configs = [v for c in configs for v in
                   ([c] if c[1] == "ddp" else [c, (c[0] + " (flat)", c[1], c[2] + ["hierarchical=false"], c[3])])]
    results = {c[0]: [] for c in configs}
    prefix = "bgb%d" % os.getpid()
    for _ in range(a.repeats):  # alternate the configurations, so drift hits all alike
        for c in configs:
            results[c[0]].append(run(a.build, prefix, a.rate, a.steps, a.devices, c))
    base = None
    print("| algorithm | steps/s | vs ddp | wire MB/step/node | vs ddp | gradient bytes/step | held-out acc |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for c in configs:
        rs = [r for r in results[c[0]] if "error" not in r]
        if not rs:
            print("| %s | failed: %s | | | | | |" % (c[0], results[c[0]][0]["error"]))
            continue
        sps = statistics.median(r["steps_per_s"] for r in rs)
        wire = statistics.median(r["wire_bytes_per_step"] for r in rs)
        if c[0] == "ddp":
            base = (sps, wire)
        ratio = ("%.2fx" % (sps / base[0]), "%.2fx fewer" % (base[1] / wire)) if base else ("", "")
        grad = rs[0]["bytes_per_step"]
        acc = rs[-1]["accuracy"]
        print("| %s | %.2f | %s | %.2f | %s | %s | %s |" % (c[0], sps, ratio[0], wire / 1e6, ratio[1],
              "%.0f" % grad if grad is not None else "-", "%.3f" % acc if acc is not None else "-"))
    done = [r for v in results.values() for r in v if "error" not in r]
    if done and not done[0]["delay_applied"]:
        print("\n(the link delay was not applied: this kernel has no netem qdisc; the rate was)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
