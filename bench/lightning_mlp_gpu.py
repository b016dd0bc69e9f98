#!/usr/bin/env python3
"""Training speed of the sample on one GPU: plrt-mlp (cuda accelerator, ddp with 1 rank over nccl)
beside the same model trained by PyTorch Lightning on the same GPU, in one run.

    python3 bench/lightning_mlp_gpu.py --build build/release [--steps 3000] [--repeats 3]
                                       [--precision 32-true,bf16-mixed,16-mixed]

Model 784-256-10 (ReLU), batch 64, SGD lr 0.05 momentum 0.9, synthetic data already on the
device for Lightning (a TensorDataset on the GPU, no loader workers) and plrt's built-in
synthetic data (host batches staged to the device).  For each precision it alternates plrt and
Lightning --repeats times and prints the median steps/s of each and the ratio.  plrt's time is
the whole of fit (set-up included); Lightning's is measured from on_train_start to
on_train_end, so the ratio is conservative for plrt.  Needs a GPU and a Python with torch and
lightning (or pytorch_lightning); without them it says why and exits 0.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

LIGHTNING_SCRIPT = r'''
import json, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
try:
    import lightning.pytorch as L
except ImportError:
    import pytorch_lightning as L
steps, precision, hidden = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.manual_seed(0)
class M(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    def training_step(self, b, i):
        x, y = b
        return F.cross_entropy(self.net(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
class Clock(L.Callback):
    def on_train_start(self, t, m):
        torch.cuda.synchronize(); self.t0 = time.perf_counter()
    def on_train_end(self, t, m):
        torch.cuda.synchronize(); self.t = time.perf_counter() - self.t0
n = 64 * 200
x = torch.randn(n, 784); y = torch.randint(0, 10, (n,))
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True,
                                     pin_memory=True)
clock = Clock()
t = L.Trainer(accelerator="gpu", devices=1, precision=precision, max_steps=steps, logger=False,
              enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
              callbacks=[clock])
t.fit(M(), loader)
print(json.dumps({"steps_per_s": steps / clock.t}))
'''


def plrt_report(cmd, report, lib_path):
    """Runs a plrt program (output hidden) and returns its --report JSON.  lib_path: a bundle's
    libraries (scripts/gpu-bundle), for plrt's programs only.  bench/torch_mlp_gpu.py uses it too."""
    env = dict(os.environ, PL_LOG_LEVEL="warn")
    if lib_path:
        env["LD_LIBRARY_PATH"] = lib_path + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    with open(report) as f:
        return json.load(f)


def run_plrt(build, steps, precision, hidden, lib_path):
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [os.path.join(build, "bin", "plrun"), "--accelerator", "cuda", "--strategy", "ddp", "--devices", "1",
               "--", os.path.join(build, "bin", "plrt-mlp"), "--features", "784", "--hidden", str(hidden),
               "--classes", "10", "--batch-size", "64", "--samples", str(64 * 200), "--heldout", "0",
               "--no-checkpoint", "--max-steps", str(steps), "--epochs", "100000", "--root-dir", tmp,
               "--precision", precision, "--report", report]
        r = plrt_report(cmd, report, lib_path)
    return r["steps"] / r["seconds"]


def run_lightning(python, steps, precision, hidden):
    out = subprocess.run([python, "-c", LIGHTNING_SCRIPT, str(steps), precision, str(hidden)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["steps_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(HERE, "..", "build", "release"))
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--precision", default="32-true,bf16-mixed,16-mixed")
    p.add_argument("--python", default="python3", help="a Python with torch and lightning")
    p.add_argument("--plrt-library-path", default="", help="extra library folder for plrt's programs (a gpu-bundle's deps)")
    a = p.parse_args()
    probe = subprocess.run([a.python, "-c", "import torch; assert torch.cuda.is_available(); "
                            "import importlib; importlib.import_module('lightning') if importlib.util.find_spec('lightning') "
                            "else importlib.import_module('pytorch_lightning')"], capture_output=True, text=True)
    if probe.returncode != 0:
        why = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "no reason given"
        print(f"lightning_mlp_gpu: skipped: no GPU, torch or lightning here ({why})")
        return 0
    print(f"{'precision':>11} {'plrt steps/s':>13} {'Lightning steps/s':>18} {'ratio':>6}")
    for precision in a.precision.split(","):
        plrt, light = [], []
        for _ in range(a.repeats):
            plrt.append(run_plrt(a.build, a.steps, precision, a.hidden, a.plrt_library_path))
            light.append(run_lightning(a.python, a.steps, precision, a.hidden))
        ps, ls = statistics.median(plrt), statistics.median(light)
        print(f"{precision:>11} {ps:>13.1f} {ls:>18.1f} {ps / ls:>6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
