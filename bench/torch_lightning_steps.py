#!/usr/bin/env python3
"""Training speed of a libtorch model under pl::Trainer (samples/torch_cnn: plrt-torch-cnn, a
pl::torch::LightningModule CNN on scikit-learn's digits, Adam, batch 32 a rank) under plrun ddp,
beside the same CNN, data and optimizer in a plain PyTorch loop under PyTorch's own
DistributedDataParallel (gloo, torch.multiprocessing), in the same run.

    python3 bench/torch_lightning_steps.py --build build/release [--epochs 10] [--repeats 3] [--worlds 1,2]
        [--variants ddp,ddp_sharded,bf16-mixed]

Variants: ddp (plrt's ddp beside PyTorch's DDP; one rank: no strategy on either side),
ddp_sharded (beside DDP with torch's ZeroRedundancyOptimizer over Adam; worlds > 1 only), and
bf16-mixed (--precision bf16-mixed beside the step under torch.autocast("cpu", bfloat16)).

Both sides train --epochs epochs without validation, one CPU thread per rank (OMP_NUM_THREADS=1),
and time rank 0's fit from its start to its end: plrt's side the report's `seconds` (Trainer.fit:
the strategy's set-up, the DistributedSampler, the loop, the epoch-end checkpoints that
--no-checkpoint turns off here, the loggers' rows), PyTorch's side its loop alone (process start,
imports and DDP construction excluded).  So the ratio is what the Trainer, its hooks, logging and
plrt's gradient synchronisation cost around the same libtorch forward, backward and Adam step.
It prints the median steps/s of each and their ratio.  Needs the sample (libtorch-dev) and
python3-sklearn (scripts/get-digits).
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GET_DIGITS = os.path.join(HERE, "..", "scripts", "get-digits")


def load_digits(path):
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    def tensor(name, dtype):
        a, b = header[name]["data_offsets"]
        return np.frombuffer(data[a:b], dtype=dtype).reshape(header[name]["shape"])
    return tensor("x", np.float32).copy(), tensor("y", np.int64).copy()


def torch_worker(rank, world, port, digits, epochs, batch, variant, result):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    x, y = load_digits(digits)
    x, y = torch.from_numpy(x), torch.from_numpy(y)

    class Cnn(nn.Module):  # samples/torch_cnn/cnn_module.hpp's DigitsCnn
        def __init__(self):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16)
            self.conv2, self.bn2 = nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32)
            self.drop, self.fc1, self.fc2 = nn.Dropout(0.25), nn.Linear(512, 64), nn.Linear(64, 10)

        def forward(self, v):
            h = F.relu(self.bn1(self.conv1(v.view(-1, 1, 8, 8))))
            h = F.max_pool2d(F.relu(self.bn2(self.conv2(h))), 2)
            return self.fc2(self.drop(F.relu(self.fc1(self.drop(h.flatten(1))))))

    torch.manual_seed(42)
    model = nn.parallel.DistributedDataParallel(Cnn()) if world > 1 else Cnn()
    if variant == "ddp_sharded":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=2e-3)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    bf16 = variant == "bf16-mixed"
    sampler = torch.utils.data.DistributedSampler(range(len(y)), num_replicas=world, rank=rank, seed=42)
    steps = 0
    dist.barrier()
    t0 = time.perf_counter()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        order = list(sampler)
        for i in range(0, len(order), batch):
            idx = torch.tensor(order[i:i + batch])
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            steps += 1
    secs = time.perf_counter() - t0
    if rank == 0:
        result.put(steps / secs)
    dist.destroy_process_group()


def run_torch(world, variant, digits, a):
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    procs = [ctx.Process(target=torch_worker, args=(r, world, port, digits, a.epochs, a.batch_size, variant, result))
             for r in range(world)]
    for p in procs:
        p.start()
    value = result.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return value


def run_plrt(world, variant, digits, a):
    strategy = "auto" if world == 1 else "ddp_sharded" if variant == "ddp_sharded" else "ddp"
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [os.path.join(a.build, "bin", "plrun"), "--accelerator", "cpu", "--strategy", strategy,
               "--devices", str(world), "--", os.path.join(a.build, "bin", "plrt-torch-cnn"), "--data", digits,
               "--heldout", "0", "--epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--no-checkpoint",
               "--no-progress-bar", "--no-model-summary", "--report", report,
               "--precision", "bf16-mixed" if variant == "bf16-mixed" else "32-true"]
        env = dict(os.environ, PL_LOG_LEVEL="warn", OMP_NUM_THREADS="1")
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, cwd=tmp)
        with open(report) as f:
            j = json.load(f)
        return j["steps"] / j["seconds"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worlds", default="1,2")
    ap.add_argument("--variants", default="ddp,ddp_sharded,bf16-mixed")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, GET_DIGITS, tmp], check=True, stdout=subprocess.DEVNULL)
        digits = os.path.join(tmp, "digits.safetensors")
        print(f"digits (1797 rows), {a.epochs} epochs, batch {a.batch_size} a rank, median of {a.repeats}")
        print(f"{'world':>5}  {'variant':>11}  {'plrt-torch-cnn steps/s':>22}  {'PyTorch steps/s':>15}  "
              f"{'plrt / PyTorch':>14}")
        for world in [int(w) for w in a.worlds.split(",")]:
            for variant in a.variants.split(","):
                if variant == "ddp_sharded" and world == 1:
                    continue
                plrt = statistics.median(run_plrt(world, variant, digits, a) for _ in range(a.repeats))
                ref = statistics.median(run_torch(world, variant, digits, a) for _ in range(a.repeats))
                print(f"{world:>5}  {variant:>11}  {plrt:>22.1f}  {ref:>15.1f}  {plrt / ref:>14.2f}", flush=True)


if __name__ == "__main__":
    main()
