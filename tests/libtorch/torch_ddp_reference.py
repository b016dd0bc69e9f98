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

--algorithm replaces DDP by one of bagua's deterministic algorithms, written here from
docs/bagua.md's formulas on a plain module and torch.distributed collectives (no DDP, no plrt):
decentralized (weights averaged before each step, gradients local), low_precision_decentralized
(the ring's uint8 weight differences after each step) and bytegrad (gradients reduce-scattered
and allgathered in uint8).  The trainable parameters form one bucket (they are far under 10 MB),
flattened in reverse registration order; unused parameters take part as zero gradients.
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
    def __init__(self, norm=True):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)  # a bias before BatchNorm only adds noise
        self.bn = nn.BatchNorm2d(4) if norm else nn.Identity()
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


def quantize(x):
    """plrt's Q (docs/bagua.md) on one chunk, all in f32: its (min, max) and one byte per value."""
    lo, hi = x.min(), x.max()
    scale = (hi - lo) / 255.0
    if scale.item() == 0:
        return lo, hi, torch.zeros_like(x, dtype=torch.uint8)
    t = ((x - lo) / scale).clamp(0.0, 255.0)
    return lo, hi, torch.round(t).to(torch.uint8)  # torch.round: half to even, as rint


def dequantize(lo, hi, q):
    return lo + q.to(torch.float32) * ((hi - lo) / 255.0)


def encode(lo, hi, q):  # on the wire: min and max as two f32, then one byte per value
    return torch.cat([torch.stack([lo, hi]).view(torch.uint8), q])


def decode(e):
    mm = e[:8].clone().view(torch.float32)
    return dequantize(mm[0], mm[1], e[8:])


def trainable(net):  # one bucket: reverse registration order
    return [p for p in net.parameters() if p.requires_grad][::-1]


def decentralized_average(net, world):  # before the step: x <- the mean over the ranks
    with torch.no_grad():
        for p in trainable(net):
            dist.all_reduce(p, dist.ReduceOp.SUM)
            p.div_(world)


class LowPrecisionRing:  # after the step; at 2 ranks both neighbours are the other rank
    def __init__(self, net, rank, world):
        self.params, self.rank, self.world = trainable(net), rank, world
        x = torch.cat([p.detach().reshape(-1) for p in self.params])
        self.w, self.l, self.r = x.clone(), x.clone(), x.clone()

    def exchange(self):
        third, five_thirds = 1.0 / 3.0, -5.0 / 3.0
        t = torch.cat([p.detach().reshape(-1) for p in self.params])
        t = t + self.l * third  # one rounding per line, as the accelerator's axpy
        t = t + self.r * third
        t = t + self.w * five_thirds
        lo, hi, q = quantize(t)
        d = dequantize(lo, hi, q)
        enc = encode(lo, hi, q)
        got = [torch.empty_like(enc) for _ in range(self.world)]
        dist.all_gather(got, enc)
        self.l = self.l + decode(got[(self.rank - 1) % self.world])
        self.r = self.r + decode(got[(self.rank + 1) % self.world])
        self.w = self.w + d
        with torch.no_grad():
            at = 0
            for p in self.params:
                p.copy_(self.w[at:at + p.numel()].view_as(p))
                at += p.numel()


def bytegrad(net, world, used):
    """The gradients' mean through uint8: chunk j of the padded bucket is quantized by every rank,
    summed by rank j in rank order, scaled by 1/n, quantized again and gathered by every rank."""
    params = trainable(net)
    g = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
    n = g.numel()
    chunk = -(-n // world)
    g = torch.cat([g, torch.zeros(chunk * world - n)])
    mine = [quantize(g[c * chunk:(c + 1) * chunk]) for c in range(world)]
    encoded = [encode(*m) for m in mine]
    parts = [torch.empty_like(encoded[0]) for _ in range(world)]
    all_to_all(parts, encoded, world)
    total = decode(parts[0])
    for e in parts[1:]:
        total = total + decode(e)
    total = total * (1.0 / world)
    mine_enc = encode(*quantize(total))
    every = [torch.empty_like(mine_enc) for _ in range(world)]
    dist.all_gather(every, mine_enc)
    mean = torch.cat([decode(e) for e in every])[:n]
    at = 0
    for p, u in zip(params, used):
        if u:
            p.grad = mean[at:at + p.numel()].view_as(p).clone()
        at += p.numel()


def all_to_all(out, inp, world):  # gloo in torch 1.13 has no all_to_all: every chunk gathered
    for j in range(world):
        got = [torch.empty_like(inp[j]) for _ in range(world)]
        dist.all_gather(got, inp[j])
        if j == dist.get_rank():
            for r in range(world):
                out[r].copy_(got[r])


def train_bagua(net, rank, args):
    """--algorithm: the bagua algorithm by hand; every rank keeps its own Adam."""
    with torch.no_grad():  # set-up: rank 0's parameters and buffers
        for t in list(net.parameters()) + list(net.buffers()):
            dist.broadcast(t, 0)
    opt = torch.optim.Adam([p for p in net.parameters() if p.requires_grad], lr=args.lr)
    ring = LowPrecisionRing(net, rank, args.world) if args.algorithm == "low_precision_decentralized" else None
    net.train()
    for s in range(args.steps):
        opt.zero_grad(set_to_none=True)
        for m in range(2):
            x, y = batch(s, m, rank, args.world, args.batch_size)
            (F.cross_entropy(net(x), y) / 2).backward()
        if args.algorithm == "bytegrad":
            used = [1 if p.grad is not None else 0 for p in trainable(net)]
            flags = torch.tensor(used, dtype=torch.int32)
            dist.all_reduce(flags, dist.ReduceOp.MAX)  # a parameter some rank used
            bytegrad(net, args.world, flags.tolist())
        if args.algorithm == "decentralized":
            decentralized_average(net, args.world)
        opt.step()
        if ring is not None:
            ring.exchange()


def worker(rank, args, port):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    torch.manual_seed(args.seed + rank)
    net = Net(norm=not args.no_norm)
    if rank == 0:
        state = load_safetensors(args.init)
        net.load_state_dict(state)
    else:  # a frozen parameter that differs until DDP broadcasts rank 0's
        with torch.no_grad():
            net.temperature.fill_(1.0 + 0.25 * rank)
    if args.algorithm != "ddp":
        train_bagua(net, rank, args)
    else:
        train_ddp(net, rank, args)
    if rank == 0:
        save_safetensors(args.save, net.state_dict())
    if args.save_all:  # every rank's own (its buffers are its own since the last broadcast)
        save_safetensors(f"{args.save}.rank{rank}", net.state_dict())
    dist.barrier()
    dist.destroy_process_group()


def train_ddp(net, rank, args):
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


def spawn_ranks(worker, args):
    """worker(rank, args, port) in args.world processes, with a free loopback port for the rendezvous."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(args, port), nprocs=args.world, join=True)


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
    ap.add_argument("--no-norm", action="store_true", help="no BatchNorm (as ddp_worker's --no-norm)")
    ap.add_argument("--algorithm", default="ddp",
                    choices=["ddp", "decentralized", "low_precision_decentralized", "bytegrad"])
    args = ap.parse_args()
    spawn_ranks(worker, args)


if __name__ == "__main__":
    main()
