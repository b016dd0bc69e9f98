#!/usr/bin/env python3
"""The reference for mlp_steps.py: the sample's model trained with PyTorch DDP (gloo), one CPU
thread per rank, on random data of the same shapes.  Prints one JSON line from rank 0:
{"world": W, "steps": N, "seconds": T, "steps_per_s": N / T}.

    python3 bench/torch_mlp_ddp.py --world 2 --steps 1000
"""
import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, args, port, queue):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    if args.world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=args.world)
    sizes = [args.features] + args.hidden + [args.classes]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    if args.world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    n = 64 * 32
    x = torch.randn(n, args.features)
    y = torch.randint(0, args.classes, (n,))

    def step(i):
        lo = (i * args.batch) % n
        xb, yb = x[lo:lo + args.batch], y[lo:lo + args.batch]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()

    for i in range(args.warmup):
        step(i)
    if args.world > 1:
        dist.barrier()
    t0 = time.perf_counter()
    for i in range(args.steps):
        step(i)
    if args.world > 1:
        dist.barrier()
    secs = time.perf_counter() - t0
    if rank == 0:
        queue.put({"world": args.world, "steps": args.steps, "seconds": secs, "steps_per_s": args.steps / secs,
                   "torch": torch.__version__})
    if args.world > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--features", type=int, default=784)
    p.add_argument("--hidden", type=lambda s: [int(v) for v in s.split(",") if v], default=[256])
    p.add_argument("--classes", type=int, default=10)
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue)) for r in range(args.world)]
    for pr in procs:
        pr.start()
    result = queue.get(timeout=600)
    for pr in procs:
        pr.join(timeout=60)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
