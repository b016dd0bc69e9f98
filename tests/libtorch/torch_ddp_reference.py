#!/usr/bin/env python3
"""tests/libtorch/ddp_worker.cpp's model, data and loop in PyTorch, trained with torch's own
DistributedDataParallel (gloo, processes on loopback): the reference the tests compare
plrt::torch's DistributedDataParallel to.  Nothing of plrt is used here.

Same CNN (Conv2d, BatchNorm2d, Linear, an unused Linear branch, a frozen temperature dividing the
logits), rank 0 starting from --init (the others from their own seeds and temperature: DDP
broadcasts rank 0's), Adam, two micro-batches per step (the
first under no_sync), zero_grad(set_to_none=True), find_unused_parameters=True, one CPU thread per
rank.  Rank 0 writes its final parameters and buffers with --save (safetensors); with --save-all
every rank writes its own to <save>.rank<r>.

    python3 tests/libtorch/torch_ddp_reference.py --world 2 --steps 20 --init init.safetensors \\
        --save ref.safetensors
"""
import argparse
import json
import os
import socket
import struct

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

SIDE, CLASSES = 8, 10


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)  # a bias before BatchNorm only adds noise
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * (SIDE // 2) * (SIDE // 2), CLASSES)
        self.unused = nn.Linear(8, 8)
        self.temperature = nn.Parameter(torch.ones(1), requires_grad=False)  # frozen

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1)) / self.temperature


def batch(s, m, r, w, b):
    xs, ys = [], []
    for j in range(b):
        n = ((s * 2 + m) * w + r) * b + j
        y = n % CLASSES
        ys.append(y)
        xs.append([((n * 131 + p * 71 + y * 17) % 97) / 97.0 - 0.5 for p in range(SIDE * SIDE)])
    return torch.tensor(xs, dtype=torch.float32).reshape(b, 1, SIDE, SIDE), torch.tensor(ys, dtype=torch.long)


DTYPES = {"F32": torch.float32, "I64": torch.int64}


def load_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        b, e = meta["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=DTYPES[meta["dtype"]]).reshape(meta["shape"]).clone()
    return out


def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        dtype = "I64" if t.dtype == torch.int64 else "F32"
        raw = (t if dtype == "I64" else t.to(torch.float32)).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def worker(rank, args, port):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.manual_seed(args.seed + rank)
    net = Net()
    if rank == 0:
        state = load_safetensors(args.init)
        net.load_state_dict(state)
    else:  # a frozen parameter that differs until DDP broadcasts rank 0's
        with torch.no_grad():
            net.temperature.fill_(1.0 + 0.25 * rank)
    ddp = nn.parallel.DistributedDataParallel(net, find_unused_parameters=True)
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    net.train()
    for s in range(args.steps):
        opt.zero_grad(set_to_none=True)
        for m in range(2):
            x, y = batch(s, m, rank, args.world, args.batch_size)
            if m == 0:
                with ddp.no_sync():
                    (F.cross_entropy(ddp(x), y) / 2).backward()
            else:
                (F.cross_entropy(ddp(x), y) / 2).backward()
        opt.step()
    if rank == 0:
        save_safetensors(args.save, net.state_dict())
    if args.save_all:  # every rank's own (its buffers are its own since the last broadcast)
        save_safetensors(f"{args.save}.rank{rank}", net.state_dict())
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--init", required=True)
    ap.add_argument("--save", required=True)
    ap.add_argument("--save-all", action="store_true")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
