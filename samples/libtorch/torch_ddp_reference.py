#!/usr/bin/env python3
"""plrt-libtorch's model and data in PyTorch, trained with torch's own DistributedDataParallel
(gloo, processes on loopback): the reference that tests/samples compares the sample's weights to,
and that bench/libtorch_ddp.py times.  Nothing of plrt is used here.

Same synthetic images (the formula of main.cpp's make_sample), same batches per rank (step s,
rank r of W: the B samples from ((s * W + r) * B) mod N), same CNN, SGD with momentum, one CPU
thread per rank.  Rank 0 prints one JSON line: {"world", "steps", "seconds", "steps_per_s", "loss"}
(seconds over the steps after --warmup) and writes the final weights with --save.

    python3 samples/libtorch/torch_ddp_reference.py --world 2 --steps 50 --init init.safetensors \\
        --save ref.safetensors

--device cuda puts the model and the batches on the GPU (every rank on cuda:0 with --backend gloo,
which shares one GPU between the processes; rank r on cuda:r with nccl), as scripts/gpu-check runs
it beside the sample on a CUDA libtorch.
"""
import argparse
import json
import os
import queue as queue_module
import socket
import struct
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

SIDE, PIXELS, CLASSES = 16, 256, 10


def make_sample(n, seed):
    y = n % CLASSES
    px = []
    for p in range(PIXELS):
        h = (n * 2654435761 + p * 40503 + seed * 97) & 0xFFFFFFFF
        px.append((h >> 22) / 1024.0 - 0.5 + ((y * 31 + p * 17) % 64) / 64.0 - 0.5)
    return px, y


class Net(nn.Module):
    def __init__(self, width=0):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        flat = 16 * (SIDE // 4) * (SIDE // 4)
        if width > 0:  # the wide head (--width): flat-W-W-10
            self.fc1, self.fc2, self.fc = nn.Linear(flat, width), nn.Linear(width, width), nn.Linear(width, CLASSES)
        else:
            self.fc = nn.Linear(flat, CLASSES)
        self.width = width

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2).flatten(1)
        if self.width > 0:
            x = F.relu(self.fc2(F.relu(self.fc1(x))))
        return self.fc(x)


def load_safetensors(path):  # F32 tensors only: what the sample writes
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "F32":
            raise ValueError(f"{path}: {name} is {meta['dtype']}, expected F32")
        b, e = meta["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(meta["shape"]).clone()
    return out


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().contiguous().to(torch.float32).numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def worker(rank, args, port, queue):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    if args.world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group(args.backend, rank=rank, world_size=args.world)
    device = torch.device(args.device if args.device == "cpu" else
                          f"cuda:{rank if args.backend == 'nccl' else 0}")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    net = Net(args.width)
    if args.init:
        state = load_safetensors(args.init)
        with torch.no_grad():
            for name, p in net.named_parameters():
                p.copy_(state[name].reshape(p.shape))
    net.to(device)
    model = nn.parallel.DistributedDataParallel(net) if args.world > 1 else net
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    # the whole set once (the formula is slow in Python), then the batches index it
    cache = [make_sample(n, args.seed) for n in range(min(args.samples, (args.steps * args.world + args.world) *
                                                          args.batch_size))]
    xs = torch.tensor([c[0] for c in cache], dtype=torch.float32).reshape(-1, 1, SIDE, SIDE)
    ys = torch.tensor([c[1] for c in cache], dtype=torch.int64)
    xs, ys = xs.to(device), ys.to(device)
    loss_value = 0.0
    t0 = time.perf_counter()
    for s in range(args.steps):
        if s == args.warmup:
            if args.world > 1:
                dist.barrier()
            t0 = time.perf_counter()
        idx = torch.tensor([((s * args.world + rank) * args.batch_size + j) % args.samples
                            for j in range(args.batch_size)])
        opt.zero_grad()
        loss = F.cross_entropy(model(xs[idx.to(device)]), ys[idx.to(device)])
        loss.backward()
        opt.step()
        loss_value = loss.item()
    secs = time.perf_counter() - t0
    timed = max(0, args.steps - args.warmup)
    mean = torch.tensor([loss_value / args.world], dtype=torch.float64)
    if args.world > 1:
        dist.all_reduce(mean)
    if rank == 0:
        if args.save:
            save_safetensors(args.save, {k: v.cpu() for k, v in net.named_parameters()})
        queue.put({"world": args.world, "steps": args.steps, "seconds": secs,
                   "steps_per_s": timed / secs if timed and secs > 0 else 0.0, "loss": mean.item(),
                   "torch": torch.__version__})
    if args.world > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--width", type=int, default=0, help="the wide head flat-W-W-10 (0: the CNN's one layer)")
    p.add_argument("--init", default="")
    p.add_argument("--save", default="")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue)) for r in range(args.world)]
    for pr in procs:
        pr.start()
    result, deadline = None, time.monotonic() + args.timeout
    try:
        while result is None:  # bounded, and a worker that died ends the wait at once
            try:
                result = queue.get(timeout=0.5)
            except queue_module.Empty:
                dead = [pr.exitcode for pr in procs if pr.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise SystemExit(f"torch_ddp_reference: no result (worker exit codes {dead}, "
                                     f"timeout {args.timeout} s)")
    finally:
        for pr in procs:
            pr.join(timeout=30)
            if pr.is_alive():
                pr.kill()
    bad = [pr.exitcode for pr in procs if pr.exitcode != 0]
    if bad:
        raise SystemExit(f"torch_ddp_reference: a worker failed (exit codes {bad})")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
