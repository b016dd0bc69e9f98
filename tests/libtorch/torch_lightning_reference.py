#!/usr/bin/env python3
"""tests/libtorch/torch_lightning_net.hpp's network trained in PyTorch by its own
DistributedDataParallel (gloo, processes on loopback), with Lightning's loop written out: the
reference test_torch_lightning_pytorch.cpp compares pl::Trainer's runs of the same network to.
Nothing of plrt is used here.

The loop, per rank r of W: DistributedSampler(shuffle=False) over the rows, --batch rows a batch;
each batch's loss / accumulate runs backward under no_sync() unless the batch ends an
accumulation window (or the epoch); at a window's end the gradient norm is clipped to --clip,
Adam steps (lr = --lr x --lr-scale: horovod's lr x W) and zero_grad(); with --precision
bf16-mixed the forward and the loss run under torch.autocast(device, torch.bfloat16), as
Lightning's MixedPrecision; 16-mixed (--device cuda) under torch.autocast("cuda", float16)
with a GradScaler (unscale before clipping); after each epoch the
schedule steps.  The schedule is libtorch's torch::optim::StepLR(1, 0.5) as the C++ side uses it:
libtorch's k-th step() sees step count k - 1, so it halves from its second step on, which in
Python's terms is LambdaLR(0.5 ** max(epoch - 1, 0)).

--data names a safetensors file with the rows (x [N, 4] f32, y [N] i64) and the initial
parameters (fc1.weight, fc1.bias, fc2.weight, fc2.bias), written by the test; rank 0 writes the
final parameters to --save (safetensors).

    python3 tests/libtorch/torch_lightning_reference.py --data in.safetensors --world 2 --batch 4 \\
        --epochs 3 --save ref.safetensors
"""
import argparse
import contextlib
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_ddp_reference import load_safetensors, save_safetensors, spawn_ranks  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def worker(rank, args, port):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(args.backend, rank=rank, world_size=args.world)
    device = torch.device(args.device)
    data = {k: v.to(device) for k, v in load_safetensors(args.data).items()}
    net = Net().to(device)
    net.load_state_dict({k: v for k, v in data.items() if k not in ("x", "y")})
    ddp = nn.parallel.DistributedDataParallel(net, device_ids=[0] if args.device == "cuda" else None)
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr * args.lr_scale)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 0.5 ** max(epoch - 1, 0))
    rows = TensorDataset(data["x"], data["y"])
    sampler = DistributedSampler(rows, num_replicas=args.world, rank=rank, shuffle=False)
    loader = DataLoader(rows, batch_size=args.batch, sampler=sampler)
    # 16-mixed: Lightning's MixedPrecision with PyTorch's GradScaler (its defaults, as plrt's)
    scaler = torch.cuda.amp.GradScaler(enabled=args.precision == "16-mixed")
    dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(args.precision)
    for _ in range(args.epochs):
        batches = len(loader)
        for b, (x, y) in enumerate(loader):
            window_end = (b + 1) % args.accumulate == 0 or b + 1 == batches
            sync = contextlib.nullcontext() if window_end else ddp.no_sync()
            with sync:
                with torch.autocast(args.device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                    loss = F.cross_entropy(ddp(x), y)
                scaler.scale(loss / args.accumulate).backward()
            if window_end:
                scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(ddp.parameters(), args.clip)
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
        schedule.step()
    if rank == 0:
        save_safetensors(args.save, {k: v.cpu() for k, v in net.state_dict().items()})
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--save", required=True)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--accumulate", type=int, default=2)
    ap.add_argument("--clip", type=float, default=0.05)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--lr-scale", type=float, default=1.0)
    ap.add_argument("--precision", default="32-true", choices=["32-true", "bf16-mixed", "16-mixed"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="cuda: every rank on GPU 0")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    args = ap.parse_args()
    spawn_ranks(worker, args)


if __name__ == "__main__":
    main()
