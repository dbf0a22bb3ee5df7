"""Writes the record files of the feeding benchmark (bench/feed_bench.py).

usage: make_feed_records.py DIR [--bytes N] [--kinds mnist,b100,b10k] [--seed S]

Every kind is raw fixed-length records (`drover run --format raw
--record-bytes N`), random but deterministic (numpy's PCG64 seeded with
--seed and the kind), about --bytes per file:
  mnist  MNIST rows: 784 float32 pixels (k/255 for a random byte k), then an
         int32 label 0-9, little-endian: 3140 bytes
  b100   100 random bytes
  b10k   10,000 random bytes
A file that already exists with the right size is kept (same seed, same bytes).
"""
import argparse
import os
import sys

import numpy as np

MNIST_DTYPE = np.dtype([("image", "<f4", (784,)), ("label", "<i4")])
KINDS = {
    # name: (record bytes, description)
    "mnist": (MNIST_DTYPE.itemsize, "MNIST rows (784 float32 + int32 label)"),
    "b100": (100, "100-byte records"),
    "b10k": (10_000, "10 KB records"),
}
CHUNK_BYTES = 64 << 20


def records_for(kind, total_bytes):
    return max(1, total_bytes // KINDS[kind][0])


def path_for(directory, kind, records):
    return os.path.join(directory, f"{kind}-{records}.raw")


def _chunk(kind, rng, count):
    if kind == "mnist":
        rows = np.empty(count, dtype=MNIST_DTYPE)
        rows["image"] = rng.integers(0, 256, size=(count, 784), dtype=np.uint8) / np.float32(255)
        rows["label"] = rng.integers(0, 10, size=count, dtype=np.int32)
        return rows.tobytes()
    return rng.bytes(count * KINDS[kind][0])


def write(directory, kind, records, seed=0):
    """Writes `records` records of `kind` into DIR (unless already there); returns the path."""
    record_bytes = KINDS[kind][0]
    path = path_for(directory, kind, records)
    if os.path.exists(path) and os.path.getsize(path) == records * record_bytes:
        return path
    rng = np.random.default_rng([seed, list(KINDS).index(kind)])
    per_chunk = max(1, CHUNK_BYTES // record_bytes)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        left = records
        while left > 0:
            count = min(per_chunk, left)
            f.write(_chunk(kind, rng, count))
            left -= count
    os.replace(tmp, path)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dir")
    parser.add_argument("--bytes", type=int, default=2 << 30, help="about this many bytes per file")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    for kind in args.kinds.split(","):
        if kind not in KINDS:
            parser.error(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
        print(write(args.dir, kind, records_for(kind, args.bytes), args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
