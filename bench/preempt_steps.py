#!/usr/bin/env python3
"""What the Trainer's preemption watch costs under plrun: plrt-mlp (mlp_steps.py's model: 784
inputs, hidden 256, 10 classes, batch 64 per rank, SGD) at 1 and 2 ranks, with the SIGTERM watch
on (the default under plrun and SLURM since issue 15: one 2-value MAX allreduce after every
optimizer step) beside the same run with PL_TRAINER_CHECKPOINT_ON_SIGTERM=0, in the same run.

    python3 bench/preempt_steps.py --build build/release [--steps 2000] [--repeats 3]

The two settings alternate, --repeats times per world size; the medians of steps/s (the whole of
fit, from --report) and their ratio are printed.
"""
import os
import statistics

from mlp_steps import parse_args, plrt_report


def steps_per_s(build, world, steps, hidden, watch):
    os.environ["PL_TRAINER_CHECKPOINT_ON_SIGTERM"] = "1" if watch else "0"
    try:
        r = plrt_report(build, world, steps, hidden)
    finally:
        del os.environ["PL_TRAINER_CHECKPOINT_ON_SIGTERM"]
    return r["steps"] / r["seconds"]


def main():
    a, _ = parse_args(__doc__, 2000)
    print(f"{'ranks':>5} {'watch on steps/s':>17} {'watch off steps/s':>18} {'on/off':>7}")
    for world in [int(w) for w in a.worlds.split(",")]:
        on, off = [], []
        for _ in range(a.repeats):
            on.append(steps_per_s(a.build, world, a.steps, a.hidden, True))
            off.append(steps_per_s(a.build, world, a.steps, a.hidden, False))
        m_on, m_off = statistics.median(on), statistics.median(off)
        print(f"{world:>5} {m_on:>17.1f} {m_off:>18.1f} {m_on / m_off:>7.2f}")


if __name__ == "__main__":
    main()
