#!/usr/bin/env python3
"""An independent reader of a run's TensorBoard event file, for test_loggers.

Written from the formats' specifications, sharing no code with plrt: the TFRecord framing
(uint64 length, masked CRC-32C of it, data, masked CRC-32C of the data; CRC-32C computed bit by
bit here) and a minimal protobuf decoder (varints, fixed32/64, length-delimited fields) for
tensorflow.Event / Summary / Summary.Value.  It checks, against the run's metrics.csv, that every
value there is in the event file with the same tag (the column) and step, and nothing else; that
the first record is file_version "brain.Event:2"; that wall times never go back and are close to
now; and that hparams.yaml parses (PyYAML) and holds what the run was given.

usage: tfevents_check.py <version folder> <expected hparams as JSON>
Exit 0 when everything holds, 1 with the reasons on stderr.
"""
import csv
import json
import math
import os
import struct
import sys
import time

import yaml


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob):
    pos = 0
    while pos < len(blob):
        if len(blob) - pos < 12:
            raise ValueError("truncated record header at byte %d" % pos)
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if hcrc != masked(header):
            raise ValueError("bad length CRC at byte %d" % pos)
        data = blob[pos + 12:pos + 12 + length]
        if len(data) != length or len(blob) < pos + 16 + length:
            raise ValueError("truncated record at byte %d" % pos)
        (dcrc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        if dcrc != masked(data):
            raise ValueError("bad data CRC at byte %d" % pos)
        yield data
        pos += 16 + length


def varint(buf, pos):
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def fields(buf):
    """(field number, wire type, value): ints for varints, raw bytes for the rest."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        elif wire == 2:
            n, pos = varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        else:
            raise ValueError("wire type %d" % wire)
        yield number, wire, value


def event(data):
    e = {"wall_time": 0.0, "step": 0, "file_version": None, "values": []}
    for number, wire, value in fields(data):
        if number == 1 and wire == 1:
            (e["wall_time"],) = struct.unpack("<d", value)
        elif number == 2 and wire == 0:
            e["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and wire == 2:
            e["file_version"] = value.decode()
        elif number == 5 and wire == 2:
            for sn, sw, sv in fields(value):
                if sn != 1 or sw != 2:
                    raise ValueError("unexpected Summary field %d" % sn)
                tag, simple = None, None
                for vn, vw, vv in fields(sv):
                    if vn == 1 and vw == 2:
                        tag = vv.decode()
                    elif vn == 2 and vw == 5:
                        (simple,) = struct.unpack("<f", vv)
                e["values"].append((tag, simple))
        else:
            raise ValueError("unexpected Event field %d (wire %d)" % (number, wire))
    return e


def main():
    folder, expected_hparams = sys.argv[1], json.loads(sys.argv[2])
    problems = []
    # A resumed run adds a file beside the earlier run's (as Lightning's logger does): read them in
    # the order they were made, each starting with its file_version record.
    files = [f for f in os.listdir(folder) if f.startswith("events.out.tfevents.")]
    if not files:
        print("no event file in %s" % folder, file=sys.stderr)
        return 1
    now = time.time()
    read = []
    for name in files:
        parts = name.split(".")  # events out tfevents <time> <host...> <pid> <n>
        if not (parts[3].isdigit() and parts[-1].isdigit() and parts[-2].isdigit()):
            problems.append("file name %s is not events.out.tfevents.<time>.<host>.<pid>.<n>" % name)
        try:
            with open(os.path.join(folder, name), "rb") as f:
                mine = [event(r) for r in records(f.read())]
        except ValueError as e:
            print("%s: %s" % (name, e), file=sys.stderr)
            return 1
        if not mine or mine[0]["file_version"] != "brain.Event:2":
            problems.append("%s: the first record is not file_version brain.Event:2" % name)
        elif abs(int(parts[3]) - mine[0]["wall_time"]) > 2:
            problems.append("%s: the name's time is not the first wall time %f" % (name, mine[0]["wall_time"]))
        read.append(mine)
    read.sort(key=lambda mine: mine[0]["wall_time"] if mine else 0)
    events = [e for mine in read for e in mine]
    times = [e["wall_time"] for e in events]
    if any(b < a for a, b in zip(times, times[1:])):
        problems.append("wall times go back: %s" % times)
    if not all(now - 600 < t <= now + 1 for t in times):
        problems.append("wall times not within the last 10 minutes: %s" % times[:3])
    got = []
    for e in events:
        if e["file_version"] is not None:
            continue
        if len(e["values"]) != 1:
            problems.append("an event with %d values" % len(e["values"]))
        got += [(tag, e["step"], v) for tag, v in e["values"]]

    want = []
    with open(os.path.join(folder, "metrics.csv")) as f:
        for row in csv.DictReader(f):
            step = int(row["step"])
            for column, cell in row.items():
                if column != "step" and cell != "":
                    want.append((column, step, float(cell)))
    key = lambda t: (t[1], t[0])
    got.sort(key=key)
    want.sort(key=key)
    if [(t, s) for t, s, _ in got] != [(t, s) for t, s, _ in want]:
        problems.append("tags and steps differ:\n  events %s\n  csv    %s" % (got, want))
    else:
        for (tag, step, g), (_, _, w) in zip(got, want):
            # the event holds a float32; metrics.csv the double with 9 significant digits
            if not (math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-30) or (math.isnan(g) and math.isnan(w))):
                problems.append("%s at step %d: event %r, csv %r" % (tag, step, g, w))

    with open(os.path.join(folder, "hparams.yaml")) as f:
        hparams = yaml.safe_load(f)
    for k, v in expected_hparams.items():
        section, _, leaf = k.rpartition(".")
        have = hparams.get(section, {}) if section else hparams
        if leaf not in have or have[leaf] != v or type(have[leaf]) is not type(v):
            problems.append("hparams.yaml %s: %r, expected %r" % (k, have.get(leaf), v))

    for p in problems:
        print(p, file=sys.stderr)
    print("%d scalar events, %d metrics.csv values, %d hparams" % (len(got), len(want), len(hparams)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
