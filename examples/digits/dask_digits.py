"""The digits example as a Dask job, in TensorFlowOnSpark's shape.

TensorFlowOnSpark's mnist_spark.py with drover and Dask in place of
TFCluster and Spark: the driver holds the data as a dask.bag, starts one
training node per Dask worker, feeds the bag to them epoch by epoch
(cluster.train), then starts an inference cluster that loads the saved model
and returns one prediction per test row, in order (cluster.inference).

    /usr/bin/python3 examples/digits/dask_digits.py                 # a LocalCluster of 2 workers
    /usr/bin/python3 examples/digits/dask_digits.py --scheduler tcp://host:8786

Each node runs main_fun(args, ctx): PyTorch DDP over gloo (CPU) with the
variables drover sets (MASTER_ADDR, RANK, WORLD_SIZE, ...), reading its
records with ctx.get_data_feed(); a record is the (pixels, label) tuple the
bag holds. Needs PYTHONPATH=build/python on the driver and the workers.
"""
import argparse
import os
import sys
import tempfile
import time


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scheduler", default=None,
                        help="a Dask scheduler's address; default: start a LocalCluster")
    parser.add_argument("--workers", type=int, default=2, help="training nodes (Dask workers)")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the bag")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="global batch, split evenly across the workers")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-dir", default=None,
                        help="where the chief saves the model (shared by the nodes); "
                             "default: a temporary directory")
    parser.add_argument("--min-accuracy", type=float, default=0.0,
                        help="exit 1 when the test accuracy is lower")
    return parser.parse_args(argv)


def make_model(hidden):
    import torch.nn as nn
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 10))


def main_fun(args, ctx):
    """Runs on every node: trains (args.mode == "train") or predicts."""
    import contextlib
    import gc

    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    path = os.path.join(args.model_dir, "digits_mlp.pt")
    if args.mode == "inference":
        model = make_model(args.hidden)
        model.load_state_dict(torch.load(path))
        model.eval()
        feed = ctx.get_data_feed(train_mode=False)
        with torch.no_grad():
            while not feed.should_stop():
                batch = feed.next_batch(64)
                if not batch:
                    break
                x = torch.from_numpy(np.stack([pixels for pixels, _ in batch]))
                feed.batch_results(model(x).argmax(dim=1).tolist())
        return

    world_size = int(os.environ["WORLD_SIZE"])
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from drover
    torch.manual_seed(args.seed)
    model = DistributedDataParallel(make_model(args.hidden))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    local_batch = max(1, args.batch_size // world_size)
    feed = ctx.get_data_feed(train_mode=True)
    epoch, total, batches = 0, 0.0, 0
    # Workers get different numbers of rows; join() lets the first done
    # shadow the others' gradient all-reduces.
    with model.join() if world_size > 1 else contextlib.nullcontext():
        while not feed.should_stop():
            batch = feed.next_batch(local_batch)
            if not batch:
                break
            if feed.epoch != epoch:
                if ctx.is_chief and epoch % 10 == 9:
                    print("epoch %d: train loss %.4f" % (epoch + 1, total / max(batches, 1)),
                          flush=True)
                epoch, total, batches = feed.epoch, 0.0, 0
            x = torch.from_numpy(np.stack([pixels for pixels, _ in batch]))
            y = torch.tensor([label for _, label in batch])
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
    if ctx.is_chief or rank == 0:
        torch.save(model.module.state_dict(), path)
        print("saved model to %s (%d records read here)" % (path, feed.records_read), flush=True)
    dist.barrier()
    # Debian's torch 1.13 destroys a ProcessGroupGloo whose last reference
    # goes with the DDP reducer while holding the GIL, and can deadlock with
    # its own gloo thread waiting for it (pytorch/pytorch#56297; seen once in
    # the Dask test). Drop the model first: destroy_process_group then drops
    # the last reference, through a binding that lets the GIL go.
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()


def load_rows(seed):
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)  # pixels are 0..16
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.25, random_state=seed, stratify=digits.target)
    return (list(zip(x_train, y_train.tolist())), list(zip(x_test, y_test.tolist())))


def run(args, client):
    import dask.bag as db

    import drover

    train_rows, test_rows = load_rows(args.seed)
    engine = drover.engines.Dask(client)
    started = time.monotonic()

    args.mode = "train"
    cluster = drover.Cluster.run(engine, main_fun, args, num_executors=args.workers,
                                 input_mode=drover.InputMode.FEED)
    cluster.train(db.from_sequence(train_rows, npartitions=args.partitions),
                  num_epochs=args.epochs)
    cluster.shutdown()
    print("trained on %d workers in %.1f s" % (args.workers, time.monotonic() - started),
          flush=True)

    args.mode = "inference"
    cluster = drover.Cluster.run(engine, main_fun, args, num_executors=args.workers,
                                 input_mode=drover.InputMode.FEED)
    predictions = cluster.inference(
        db.from_sequence(test_rows, npartitions=args.partitions)).compute()
    cluster.shutdown()
    labels = [label for _, label in test_rows]
    if len(predictions) != len(labels):
        print("inference returned %d predictions for %d rows" % (len(predictions), len(labels)))
        return None
    accuracy = sum(p == y for p, y in zip(predictions, labels)) / len(labels)
    print("test accuracy: %.3f (%d predictions, in input order)" % (accuracy, len(predictions)),
          flush=True)
    return accuracy


def main(argv=None):
    args = parse_args(argv)
    from distributed import Client, LocalCluster

    with tempfile.TemporaryDirectory(prefix="digits-model-") as model_dir:
        args.model_dir = args.model_dir or model_dir
        if args.scheduler:
            with Client(args.scheduler) as client:
                accuracy = run(args, client)
        else:
            with LocalCluster(n_workers=args.workers, threads_per_worker=2,
                              dashboard_address=None) as local, Client(local) as client:
                accuracy = run(args, client)
    if accuracy is None or accuracy < args.min_accuracy:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
