"""Writes scikit-learn's bundled digits as CSV shards for `drover run --input`.

    /usr/bin/python3 examples/digits/make_csv.py digits-data

Makes digits-data/train-00000.csv ... (--shards files, 75% of the 1,797
images, shuffled once with --seed) and digits-data/test.csv (the other 25%).
Each line is one image: 64 pixel values (0..16) then the label (0..9).
"""
import argparse
import os

from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def write_rows(path, images, labels):
    with open(path, "w") as f:
        for image, label in zip(images, labels):
            f.write(",".join(str(int(v)) for v in image) + f",{int(label)}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data, digits.target, test_size=0.25, random_state=args.seed,
        stratify=digits.target)
    os.makedirs(args.directory, exist_ok=True)
    for shard in range(args.shards):
        write_rows(os.path.join(args.directory, f"train-{shard:05d}.csv"),
                   x_train[shard::args.shards], y_train[shard::args.shards])
    write_rows(os.path.join(args.directory, "test.csv"), x_test, y_test)
    print(f"wrote {len(x_train)} training rows in {args.shards} shards and "
          f"{len(x_test)} test rows to {args.directory}/")


if __name__ == "__main__":
    main()
