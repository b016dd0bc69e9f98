#!/usr/bin/env python3
"""Training speed of plrt-mlp against a plain PyTorch eager loop on the same shapes, one device,
steady state, in one run (issue 30's table).

    python3 bench/torch_mlp_gpu.py --build build/release [--repeats 3] [--rows ROWS]
                                   [--accelerator cuda|cpu] [--steps-scale 1.0]

ROWS: ';'-separated "hidden/batch/precision" rows; default (the H200 table):
    4096,4096/1024/32-true;4096,4096/1024/bf16-mixed;8192,8192/4096/bf16-mixed;256,128/64/32-true
Each model is 784-hidden-10 with ReLU, SGD lr 0.05 momentum 0.9, softmax cross-entropy.

plrt: `plrt-mlp --accelerator A --devices 1` (strategy auto: one device) on its built-in synthetic
data (host batches, staged to the device by the Trainer).  Its steady rate is taken from two fits,
of S1 and S2 optimizer steps: (S2 - S1) / (t2 - t1), each t the fit's seconds from --report, so
that set-up, the first steps' allocations and the end of fit cancel out.
PyTorch: the same model (torch.nn.Linear layers, F.cross_entropy, torch.optim.SGD, autocast for
bf16-mixed / 16-mixed with a GradScaler for 16-mixed), the batches already on the device,
`--warmup` steps, then S2 - S1 steps timed between two synchronisations.
The two sides alternate --repeats times; the medians and plrt / PyTorch are printed per row,
with the achieved TFLOP/s (6 x batch x weights per step, the GEMMs only).

Without the accelerator (no CUDA torch, or plrt built without cuda) it says why and exits 0.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from lightning_mlp_gpu import plrt_report  # noqa: E402  (one way to run a plrt program for its report)
DEFAULT_ROWS = "4096,4096/1024/32-true;4096,4096/1024/bf16-mixed;8192,8192/4096/bf16-mixed;256,128/64/32-true"

TORCH_SCRIPT = r'''
import json, sys, time
import torch, torch.nn as nn, torch.nn.functional as F
hidden, batch, precision, warmup, steps, device = sys.argv[1], int(sys.argv[2]), sys.argv[3], \
    int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
widths = [784] + [int(h) for h in hidden.split(",") if h] + [10]
torch.manual_seed(0)
layers = []
for i in range(len(widths) - 1):
    layers.append(nn.Linear(widths[i], widths[i + 1]))
    if i + 2 < len(widths):
        layers.append(nn.ReLU())
model = nn.Sequential(*layers).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
nb = 8
xs = torch.randn(nb, batch, 784, device=device)
ys = torch.randint(0, 10, (nb, batch), device=device)
low = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
scaler = torch.amp.GradScaler(device) if precision == "16-mixed" else None
def step(i):
    x, y = xs[i % nb], ys[i % nb]
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device_type=device, dtype=low, enabled=low is not None):
        loss = F.cross_entropy(model(x), y)
    if scaler:
        scaler.scale(loss).backward(); scaler.step(opt); scaler.update()
    else:
        loss.backward(); opt.step()
def sync():
    if device == "cuda":
        torch.cuda.synchronize()
for i in range(warmup):
    step(i)
sync()
t0 = time.perf_counter()
for i in range(steps):
    step(i)
sync()
print(json.dumps({"steps_per_s": steps / (time.perf_counter() - t0)}))
'''


def flops_per_step(hidden, batch):
    widths = [784] + [int(h) for h in hidden.split(",") if h] + [10]
    weights = sum(widths[i] * widths[i + 1] for i in range(len(widths) - 1))
    return 6.0 * batch * weights  # forward 2, backward 4 multiply-adds per weight and row


def run_plrt(build, accelerator, hidden, batch, precision, steps, lib_path):
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        cmd = [os.path.join(build, "bin", "plrt-mlp"), "--accelerator", accelerator, "--devices", "1",
               "--features", "784", "--hidden", hidden, "--classes", "10", "--batch-size", str(batch),
               "--samples", str(batch * 8), "--heldout", "0", "--no-checkpoint", "--max-steps", str(steps),
               "--epochs", "-1", "--root-dir", tmp, "--precision", precision, "--report", report]
        r = plrt_report(cmd, report, lib_path)
    if r["steps"] != steps:
        raise SystemExit(f"torch_mlp_gpu: plrt-mlp ran {r['steps']} steps, not {steps}")
    return r["seconds"]


def run_torch(python, accelerator, hidden, batch, precision, warmup, steps):
    out = subprocess.run([python, "-c", TORCH_SCRIPT, hidden, str(batch), precision, str(warmup), str(steps),
                          accelerator], check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["steps_per_s"]


def parse_rows(text):
    rows = []
    for item in text.split(";"):
        parts = item.split("/")
        if len(parts) != 3:
            raise SystemExit(f"torch_mlp_gpu: row '{item}' is not hidden/batch/precision, e.g. 4096,4096/1024/32-true")
        hidden, batch, precision = parts
        if not all(h.isdigit() and int(h) > 0 for h in hidden.split(",")) or not batch.isdigit() or int(batch) < 1:
            raise SystemExit(f"torch_mlp_gpu: row '{item}': widths and batch must be positive integers")
        if precision not in ("32-true", "bf16-mixed", "16-mixed"):
            raise SystemExit(f"torch_mlp_gpu: row '{item}': precision '{precision}' is not 32-true, bf16-mixed or "
                             "16-mixed")
        rows.append((hidden, int(batch), precision))
    return rows


def steps_for(hidden, batch, scale):
    """S1 and S2: about 1 s and 4 s of an H200 at PyTorch's rate (the table's rows), at least 20 apart."""
    work = flops_per_step(hidden, batch)
    s2 = max(40, int(scale * min(4000, 4.0e14 / work)))
    return s2 // 4, s2


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(HERE, "..", "build", "release"))
    p.add_argument("--accelerator", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--rows", default=DEFAULT_ROWS)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=20, help="PyTorch's untimed steps")
    p.add_argument("--steps-scale", type=float, default=1.0, help="multiplies every row's step counts")
    p.add_argument("--python", default="python3", help="a Python with torch (CUDA torch for --accelerator cuda)")
    p.add_argument("--plrt-library-path", default="", help="extra library folder for plrt's programs (a gpu-bundle's deps)")
    a = p.parse_args()
    if a.repeats < 1 or a.steps_scale <= 0 or a.warmup < 0:
        raise SystemExit("torch_mlp_gpu: --repeats must be >= 1, --steps-scale > 0 and --warmup >= 0")
    rows = parse_rows(a.rows)
    want = "torch.cuda.is_available()" if a.accelerator == "cuda" else "True"
    probe = subprocess.run([a.python, "-c", f"import torch; assert {want}, 'torch sees no GPU'"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        why = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "no reason given"
        print(f"torch_mlp_gpu: skipped: no {a.accelerator} torch here ({why})")
        return 0
    if not os.path.exists(os.path.join(a.build, "bin", "plrt-mlp")):
        print(f"torch_mlp_gpu: skipped: no plrt-mlp in {a.build}/bin")
        return 0
    print(f"{'hidden':>11} {'batch':>6} {'precision':>11} {'plrt steps/s':>13} {'PyTorch steps/s':>16} "
          f"{'ratio':>6} {'plrt TFLOP/s':>13} {'PyTorch TFLOP/s':>16}")
    for hidden, batch, precision in rows:
        s1, s2 = steps_for(hidden, batch, a.steps_scale)
        plrt, torch = [], []
        for _ in range(a.repeats):
            t1 = run_plrt(a.build, a.accelerator, hidden, batch, precision, s1, a.plrt_library_path)
            t2 = run_plrt(a.build, a.accelerator, hidden, batch, precision, s2, a.plrt_library_path)
            plrt.append((s2 - s1) / max(t2 - t1, 1e-9))
            torch.append(run_torch(a.python, a.accelerator, hidden, batch, precision, a.warmup, s2 - s1))
        ps, ts = statistics.median(plrt), statistics.median(torch)
        f = flops_per_step(hidden, batch) / 1e12
        print(f"{hidden:>11} {batch:>6} {precision:>11} {ps:>13.1f} {ts:>16.1f} {ps / ts:>6.2f} {ps * f:>13.1f} "
              f"{ts * f:>16.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
