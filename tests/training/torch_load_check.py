#!/usr/bin/env python3
"""Checks that plrt-mlp's --save file loads into the PyTorch model it claims to match:
nn.ModuleList([nn.Linear(...), ...]) with load_state_dict(strict=True), and that PyTorch's forward
pass with those weights classifies the training data well (a transposed or misnamed layout would
fail to load or score at chance level).

    torch_load_check.py make-data data.safetensors     # a learnable x/y file for plrt-mlp --data
    torch_load_check.py check weights.safetensors data.safetensors

The safetensors file is parsed here by hand (Debian ships no python3-safetensors).  Exits 77
(CTest's skip code) when torch is not importable.
"""
import json
import struct
import sys

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("torch is not installed (apt-get install python3-torch): skipped")
    sys.exit(77)

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32,
          "U8": torch.uint8, "F16": torch.float16, "BF16": torch.bfloat16}


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(body[b:end]), dtype=DTYPES[e["dtype"]]) if end > b else torch.empty(0)
        out[name] = t.reshape(e["shape"])
    return out


def save(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, t in tensors.items():
        b = t.contiguous().numpy().tobytes()
        dt = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def make_data(path):
    g = torch.Generator().manual_seed(3)
    centres = torch.randn(4, 20, generator=g) * 2.0
    y = torch.randint(0, 4, (2000,), generator=g)
    x = centres[y] + torch.randn(2000, 20, generator=g)
    save(path, {"x": x.float(), "y": y})


def main():
    if sys.argv[1] == "make-data":
        return make_data(sys.argv[2])
    weights, data = load(sys.argv[2]), load(sys.argv[3])
    n_layers = len([k for k in weights if k.endswith(".weight")])
    layers = nn.ModuleList(
        [nn.Linear(weights[f"layers.{i}.weight"].shape[1], weights[f"layers.{i}.weight"].shape[0])
         for i in range(n_layers)])
    model = nn.Module()
    model.layers = layers
    model.load_state_dict(weights, strict=True)  # raises on any missing, extra or misshapen tensor
    x, y = data["x"], data["y"]
    with torch.no_grad():
        h = x
        for i, layer in enumerate(layers):
            h = layer(h)
            if i + 1 < n_layers:
                h = torch.relu(h)
    acc = (h.argmax(dim=1) == y).double().mean().item()
    print(f"PyTorch loaded {n_layers} layers strictly; accuracy on the data {acc:.4f}")
    if acc < 0.9:
        sys.exit(f"PyTorch's accuracy with plrt's weights is {acc:.4f}: the layout does not match")


if __name__ == "__main__":
    main()
