#!/usr/bin/env python3
"""The horovod strategy's training speed beside ddp's and PyTorch DDP's, in the same run, on
mlp_steps.py's model (plrt-mlp: 784 inputs, hidden 256, 10 classes, batch 64 per rank, SGD).

    python3 bench/horovod_steps.py --build build/release [--steps 1000] [--repeats 3] [--worlds 1,2]

For each world size it runs, alternately and --repeats times: plrt ddp, plrt horovod with its
default fusion (fusion_threshold_mb=128, cycle_time_ms=1), with fusion_threshold_mb=0 (every
gradient its own allreduce) and with cycle_time_ms=5 (plrun, cpu, gloo), and PyTorch DDP
(torch_mlp_ddp.py) when the Python given can import torch.  It prints the median steps/s of each
side and its ratio to plrt ddp's and to PyTorch's, and, from --report's strategy_stats, per synced
step: horovod's negotiation cycles, its gradient allreduces (ddp: its buckets, one allreduce each),
the gradients each allreduce carried, and the milliseconds after_backward waited for the results
(exposed_allreduce_ms).  At one rank horovod starts no fusion thread (cycles and allreduces are 0),
so only its default is run there: the row measures the strategy's fixed cost against ddp's.
plrt's time is the whole of fit (set-up included), PyTorch's excludes its warm-up (mlp_steps.py).
"""
import statistics

from mlp_steps import parse_args, plrt_report, run_torch

SIDES = [("ddp", "ddp", []), ("horovod", "horovod", []),
         ("horovod fusion=0", "horovod", ["--strategy-option", "fusion_threshold_mb=0"]),
         ("horovod cycle=5ms", "horovod", ["--strategy-option", "cycle_time_ms=5"])]


def per_step(st, steps):
    """cycles/step, allreduces/step, gradients/allreduce, exposed ms/step from one report's stats."""
    if "cycles" in st:  # horovod
        n = st.get("synced_steps") or 0
        if not n or not st.get("allreduces"):
            return "-", "-", "-", "-"
        return ("%.2f" % (st["cycles"] / n), "%.2f" % (st["allreduces"] / n),
                "%.1f" % (st["fused_tensors"] / st["allreduces"]), "%.3f" % (st["exposed_allreduce_ms"] / n))
    if not st.get("buckets") or "allreduce_ms" not in st or not st["allreduce_ms"]:
        return "-", "-", "-", "-"  # ddp at one rank: no collective
    return "-", "%d" % st["buckets"], "-", "%.3f" % (st["exposed_allreduce_ms"] / steps)


def ratio(a, b):
    return "%.2fx" % (a / b) if b else "-"


def main():
    a, torch_ok = parse_args(__doc__, 1000)
    print("| W | side | steps/s | vs plrt ddp | vs PyTorch DDP | cycles/step | allreduces/step | grads/allreduce "
          "| exposed ms/step |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for world in [int(w) for w in a.worlds.split(",")]:
        sides = SIDES if world > 1 else SIDES[:2]
        speed = {name: [] for name, _, _ in sides}
        torch, last = [], {}
        for _ in range(a.repeats):
            for name, strategy, flags in sides:
                r = plrt_report(a.build, world, a.steps, a.hidden, strategy, flags)
                speed[name].append(r["steps"] / r["seconds"])
                last[name] = r
            if torch_ok:
                torch.append(run_torch(a.python, world, a.steps, a.hidden))
        base = statistics.median(speed["ddp"])
        ts = statistics.median(torch) if torch else 0.0
        for name, _, _ in sides:
            sps = statistics.median(speed[name])
            stats = per_step(last[name].get("strategy_stats", {}), last[name]["steps"])
            print("| %d | plrt %s | %.1f | %s | %s | %s |" % (world, name, sps, ratio(sps, base), ratio(sps, ts),
                                                            " | ".join(stats)), flush=True)
        if torch_ok:
            print("| %d | PyTorch DDP | %.1f | %s | 1.00x | - | - | - | - |" % (world, ts, ratio(ts, base)), flush=True)


if __name__ == "__main__":
    main()
