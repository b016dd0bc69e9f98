#!/usr/bin/env python3
"""PyTorch's own learning-rate schedulers (torch.optim.lr_scheduler) on the configurations that
tests/sdk/test_lr_scheduler.cpp builds with plrt's: prints one JSON object, per configuration the
lr (and momentum where cycled) after construction and after each of `steps` steps, with 17
significant digits.  No plrt code is involved: it is the test's independent reference."""
import json
import sys

import torch
from torch.optim import SGD, Adam
from torch.optim import lr_scheduler as S

STEPS = 40


def sgd(lr=0.1, momentum=0.9):
    return SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr, momentum=momentum)


def run(opt, sched, steps=STEPS, metrics=None, momentum=False):
    lrs, moms = [opt.param_groups[0]["lr"]], []
    key = "betas" if "betas" in opt.defaults else "momentum"
    if momentum:
        g = opt.param_groups[0]
        moms.append(g["betas"][0] if key == "betas" else g["momentum"])
    for i in range(steps):
        opt.step()
        if metrics is not None:
            sched.step(metrics[i])
        else:
            sched.step()
        g = opt.param_groups[0]
        lrs.append(g["lr"])
        if momentum:
            moms.append(g["betas"][0] if key == "betas" else g["momentum"])
    out = {"lr": [repr(x) for x in lrs]}
    if momentum:
        out["momentum"] = [repr(x) for x in moms]
    return out


PLATEAU = [1.0, 0.9, 0.95, 0.95, 0.95, 0.8, 0.85, 0.85, 0.85, 0.85, 0.7, 0.7, 0.7, 0.69995, 0.7, 0.7, 0.7,
           0.7, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]


def main():
    r = {}
    o = sgd(); r["step"] = run(o, S.StepLR(o, step_size=3, gamma=0.5))
    o = sgd(); r["multistep"] = run(o, S.MultiStepLR(o, milestones=[2, 5, 5, 11], gamma=0.3))
    o = sgd(); r["exponential"] = run(o, S.ExponentialLR(o, gamma=0.93))
    o = sgd(); r["cosine"] = run(o, S.CosineAnnealingLR(o, T_max=7, eta_min=0.001))
    o = sgd(); r["linear"] = run(o, S.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=6))
    o = sgd(); r["onecycle"] = run(o, S.OneCycleLR(o, max_lr=0.8, total_steps=STEPS), STEPS - 1, momentum=True)
    o = sgd(); r["onecycle12"] = run(o, S.OneCycleLR(o, max_lr=0.5, total_steps=12), 11, momentum=True)
    o = Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    r["onecycle3"] = run(o, S.OneCycleLR(o, max_lr=0.01, total_steps=STEPS, pct_start=0.25, anneal_strategy="linear",
                                         three_phase=True, div_factor=10, final_div_factor=100), STEPS - 1,
                         momentum=True)
    o = sgd(); r["plateau_min"] = run(o, S.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2, cooldown=1),
                                      len(PLATEAU), PLATEAU)
    o = sgd()
    r["plateau_max_abs"] = run(o, S.ReduceLROnPlateau(o, mode="max", factor=0.2, patience=1, threshold=0.05,
                                                      threshold_mode="abs", min_lr=0.001),
                               len(PLATEAU), [-x for x in PLATEAU])
    json.dump(r, sys.stdout)


if __name__ == "__main__":
    main()
