#!/usr/bin/env python3
"""What the Trainer's profiler costs: plrt-mlp (mlp_steps.py's model: 784 inputs, hidden 256, 10
classes, batch 64 per rank, SGD) under plrun --strategy ddp at 1 and 2 ranks, with
PL_TRAINER_PROFILER unset (off, the reference), simple and trace, in the same run.

    python3 bench/profiler_steps.py --build build/release [--steps 2000] [--repeats 3]

The three settings alternate, --repeats times per world size; the medians of steps/s (the whole of
fit, from --report, the profiler's report and trace files included) and their ratios to off are
printed.
"""
import os
import statistics

from mlp_steps import parse_args, plrt_report

MODES = ("off", "simple", "trace")


def steps_per_s(build, world, steps, hidden, mode):
    if mode != "off":
        os.environ["PL_TRAINER_PROFILER"] = mode
    try:
        r = plrt_report(build, world, steps, hidden)
    finally:
        os.environ.pop("PL_TRAINER_PROFILER", None)
    return r["steps"] / r["seconds"]


def main():
    a, _ = parse_args(__doc__, 2000)
    print(f"{'ranks':>5} {'off steps/s':>12} {'simple steps/s':>15} {'trace steps/s':>14} {'simple/off':>11} "
          f"{'trace/off':>10}")
    for world in [int(w) for w in a.worlds.split(",")]:
        runs = {m: [] for m in MODES}
        for _ in range(a.repeats):
            for m in MODES:
                runs[m].append(steps_per_s(a.build, world, a.steps, a.hidden, m))
        off, simple, trace = (statistics.median(runs[m]) for m in MODES)
        print(f"{world:>5} {off:>12.1f} {simple:>15.1f} {trace:>14.1f} {simple / off:>11.2f} {trace / off:>10.2f}",
              flush=True)


if __name__ == "__main__":
    main()
