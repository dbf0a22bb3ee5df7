"""The Python consumer of the feeding benchmark (bench/feed_bench.py), run by `drover run --input`.

usage: feed_consumer.py [--kind mnist|bytes] [--batch K] [--out FILE]

Reads every record drover feeds this node with drover.DataFeed.next_batch(K):
for --kind mnist with the schema [("image", "float32", 784), ("label",
"int32")], so each batch is a dict of numpy arrays (image: K x 784 float32,
label: K int32), what a training step takes; otherwise without a schema, so
each batch is a list of bytes objects (bytes are counted as records x the
first record's length: the benchmark's records are fixed-length). Prints one
JSON line {"records", "bytes", "seconds"} to stdout and, with --out, to FILE,
timed from the first record received (the return of the first non-empty
next_batch) to the end of the feed (should_stop() or an empty batch).
"""
import argparse
import json
import sys
import time

import drover

MNIST_SCHEMA = [("image", "float32", 784), ("label", "int32")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kind", choices=("mnist", "bytes"), default="bytes")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--out")
    args = parser.parse_args()

    records = 0
    nbytes = 0
    first = None
    if args.kind == "mnist":
        feed = drover.DataFeed(schema=MNIST_SCHEMA)
        while not feed.should_stop():
            batch = feed.next_batch(args.batch)
            count = len(batch["label"])
            if count == 0:
                break
            if first is None:
                first = time.perf_counter()
            records += count
            nbytes += batch["image"].nbytes + batch["label"].nbytes
    else:
        feed = drover.DataFeed()
        while not feed.should_stop():
            batch = feed.next_batch(args.batch)
            if not batch:
                break
            if first is None:
                first = time.perf_counter()
            records += len(batch)
            nbytes += len(batch) * len(batch[0])  # fixed-length records
    end = time.perf_counter()
    if records == 0:
        print("feed_consumer.py: the feed ended without a record", file=sys.stderr)
        return 1
    line = json.dumps({"records": records, "bytes": nbytes, "seconds": end - first})
    print(line, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
