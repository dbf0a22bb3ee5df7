"""Distributed data-parallel training of a small MLP on scikit-learn's digits.

Fed by drover (the examples/digits/README.md command): the training rows come
as CSV through drover's data feed, epoch by epoch, a share to each worker:

    /usr/bin/python3 examples/digits/make_csv.py digits-data
    build/bin/drover run --nodes 2 --input 'digits-data/train-*.csv' --epochs 40 -- \
        /usr/bin/python3 examples/digits/train.py --test digits-data/test.csv

Or loading the bundled data set itself, on every worker:

    build/bin/drover run --nodes 2 -- /usr/bin/python3 examples/digits/train.py

Every node is a worker: PyTorch DDP over gloo (CPU), initialised from the
variables drover sets (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), so the same
script runs unchanged under torchrun:

    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node=2 \
        examples/digits/train.py

The data is load_digits() (1,797 8x8 images, bundled with scikit-learn, no
download), split once into train and test with a fixed seed. Each worker trains
on its shard of the training set (DistributedSampler) with its share of the
global batch; DDP averages the gradients. The test set is evaluated in shards
too and the counts summed, so every worker knows the accuracy; the chief prints
it and saves the model's state_dict to --model-dir (default: the node's log
directory, $DROVER_LOG_DIR, else the current directory). Under drover every
worker reports its training loss each step and the test accuracy each epoch
(drover.report), which the status page charts.
"""
import argparse
import os
import sys
import time

import numpy as np

import torch
import torch.distributed as dist
import torch.nn as nn
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="global batch, split evenly across the workers")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test", default=None,
                        help="the test set as CSV (make_csv.py); default: split the bundled "
                             "data set")
    parser.add_argument("--model-dir", default=None,
                        help="where the chief saves digits_mlp.pt "
                             "(default: the node's log dir, $DROVER_LOG_DIR, or .)")
    return parser.parse_args()


def node_context():
    """drover.context() when started by drover, else None (torchrun, plain python)."""
    if "DROVER_CONTEXT_FILE" not in os.environ:
        return None
    try:
        import drover
    except ImportError:  # drover's Python module not on PYTHONPATH: the variables suffice
        return None
    return drover.context()


def metrics_reporter():
    """drover.report and drover.flush_reports (the status page's charts; no-ops
    outside drover), or no-ops when drover's module is not importable
    (torchrun, plain python)."""
    try:
        import drover
    except ImportError:
        return (lambda step=None, **metrics: None), (lambda: None)
    return drover.report, drover.flush_reports


report, flush_reports = metrics_reporter()


def load_data(seed):
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)  # pixels are 0..16
    y = torch.tensor(digits.target, dtype=torch.long)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.25, random_state=seed, stratify=y)
    return TensorDataset(x_train, y_train), TensorDataset(x_test, y_test)


def load_test_csv(path):
    rows = np.loadtxt(path, delimiter=",", dtype=np.float32, ndmin=2)
    return TensorDataset(torch.from_numpy(rows[:, :64] / 16.0),
                         torch.from_numpy(rows[:, 64].astype(np.int64)))


# One CSV line of make_csv.py: 64 pixels, then the label; decoded in C++ into
# NumPy arrays by DataFeed.next_batch.
DIGITS_SCHEMA = [("pixels", "float32", 64), ("label", "int64")]


def fed_batches(feed, batch_size):
    """(epoch, x, y) for every batch drover feeds this worker, until the feed ends."""
    while not feed.should_stop():
        batch = feed.next_batch(batch_size)
        if len(batch["label"]) == 0:
            return
        yield (feed.epoch, torch.from_numpy(batch["pixels"] / 16.0),
               torch.from_numpy(batch["label"]))


CHECKPOINT = "digits_checkpoint.pt"


def restore_checkpoint(model, optimizer, model_dir, world_size):
    """In a later round of `drover run --max-restarts`: the chief's last
    checkpoint, handed to every worker, loaded into the model and optimizer
    before DDP wraps the model. Returns its epoch, or None."""
    if int(os.environ.get("DROVER_RESTART_COUNT", "0")) == 0:
        return None
    path = os.path.join(model_dir, CHECKPOINT)
    state = [torch.load(path) if os.path.exists(path) and int(os.environ.get("RANK", "0")) == 0
             else None]
    if world_size > 1:
        dist.broadcast_object_list(state, src=0)
    if state[0] is None:
        return None
    model.load_state_dict(state[0]["model"])
    optimizer.load_state_dict(state[0]["optimizer"])
    return state[0]["epoch"]


def save_checkpoint(model, optimizer, feed, epoch, is_chief, model_dir, world_size):
    """The chief saves the model; then every worker commits its feed at the
    same step, so a later round resumes the model and the feed from the same
    point: no row trained twice, none skipped."""
    if is_chief:
        module = model.module if isinstance(model, DistributedDataParallel) else model
        path = os.path.join(model_dir, CHECKPOINT)
        os.makedirs(model_dir, exist_ok=True)
        torch.save({"model": module.state_dict(), "optimizer": optimizer.state_dict(),
                    "epoch": epoch}, path + ".tmp")
        os.replace(path + ".tmp", path)
    if world_size > 1:
        dist.barrier()
    feed.commit()


def make_model(hidden):
    return nn.Sequential(
        nn.Linear(64, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, 10))


@torch.no_grad()
def evaluate(model, test, rank, world_size):
    # Each worker scores every world_size-th test example; the sums make the
    # accuracy over the whole test set, known to every worker.
    x, y = test.tensors
    x, y = x[rank::world_size], y[rank::world_size]
    model.eval()
    counts = torch.tensor([(model(x).argmax(dim=1) == y).sum().item(), len(y)],
                          dtype=torch.float64)
    model.train()
    if world_size > 1:
        dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def main():
    args = parse_args()
    torch.set_num_threads(1)  # one core per worker; the nodes share the machine
    started = time.monotonic()

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world_size > 1:
        dist.init_process_group("gloo")  # env:// : MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    ctx = node_context()
    is_chief = ctx.is_chief if ctx is not None else rank == 0
    model_dir = (args.model_dir or (ctx.log_dir if ctx is not None else None)
                 or os.environ.get("DROVER_LOG_DIR") or ".")
    who = f"{ctx.job_name}:{ctx.task_index}" if ctx is not None else f"rank {rank}"
    print(f"{who}: rank {rank} of {world_size}, chief={is_chief}", flush=True)

    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP also broadcasts)
    model = make_model(args.hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    resumed = restore_checkpoint(model, optimizer, model_dir, world_size)
    if resumed is not None and is_chief:
        print(f"resuming from the checkpoint of epoch {resumed + 1}", flush=True)
    if world_size > 1:
        model = DistributedDataParallel(model)
    loss_fn = nn.CrossEntropyLoss()
    # A global batch split across the workers: the same steps, whatever the
    # number of workers, so the accuracy does not depend on it.
    local_batch = max(1, args.batch_size // world_size)

    if "DROVER_FEED_SOCKET" in os.environ:  # started by `drover run --input ...`
        if ctx is None:
            sys.exit("drover feeds this node, but its Python module is not importable: "
                     "set PYTHONPATH=build/python")
        test = load_test_csv(args.test) if args.test else load_data(args.seed)[1]
        feed = ctx.get_data_feed(train_mode=True, schema=DIGITS_SCHEMA)
        checkpoint = lambda epoch: save_checkpoint(  # noqa: E731
            model, optimizer, feed, epoch, is_chief, model_dir, world_size)
        score = lambda: evaluate(model, test, rank, world_size)  # noqa: E731
        steps = train_fed(model, feed, local_batch, optimizer, loss_fn, is_chief, checkpoint,
                          score)
    else:
        train, test = load_data(args.seed)
        score = lambda: evaluate(model, test, rank, world_size)  # noqa: E731
        steps = train_local(model, train, local_batch, optimizer, loss_fn, is_chief, rank,
                            world_size, args.epochs, args.seed, score)

    accuracy = evaluate(model, test, rank, world_size)
    report(step=steps, test_accuracy=accuracy)
    if is_chief:
        print(f"test accuracy: {accuracy:.3f}", flush=True)
        os.makedirs(model_dir, exist_ok=True)
        path = os.path.join(model_dir, "digits_mlp.pt")
        module = model.module if isinstance(model, DistributedDataParallel) else model
        torch.save(module.state_dict(), path)
        print(f"saved model to {os.path.abspath(path)} "
              f"({time.monotonic() - started:.1f} s)", flush=True)
    if world_size > 1:
        dist.barrier()  # nobody leaves while the chief still saves
        # Leave without tearing DDP and gloo down: Debian's torch 1.13 can
        # deadlock in ~Reducer -> ~ProcessGroupGloo, which joins a gloo
        # thread that waits for the GIL the exiting thread holds (seen once
        # in about fifteen 3-node runs). Everything is written and flushed.
        sys.stdout.flush()
        sys.stderr.flush()
        flush_reports()  # os._exit skips the exit-time flush
        os._exit(0)
    return 0


def step(model, optimizer, loss_fn, x, y):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def agree(world_size, has_batch, began_epoch):
    """This step as every worker sees it: whether all of them have a batch,
    and whether any of them began an epoch with it. Equal shares keep the
    workers in step on their own; a dynamic feed (an elastic run, `--nodes
    MIN:MAX`) hands them different numbers of rows and turns their epochs at
    different steps, so they agree before each step and every collective
    (DDP's all-reduce, the checkpoint's barrier, the score) pairs up."""
    if world_size == 1:
        return has_batch, began_epoch
    flags = torch.tensor([0 if has_batch else 1, 1 if began_epoch else 0], dtype=torch.int32)
    dist.all_reduce(flags)
    return flags[0].item() == 0, flags[1].item() > 0


def train_fed(model, feed, local_batch, optimizer, loss_fn, is_chief, checkpoint, score):
    # A checkpoint (and feed commit) is taken after the first step of each
    # epoch, by every worker at the same step, having trained on every row it
    # was handed; so is the test accuracy of the epoch before (a collective).
    # The rows a worker still holds when another has run out are not trained
    # on (with equal shares there are none).
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    batches_left = fed_batches(feed, local_batch)
    epoch, total, batches, rows, steps = None, 0.0, 0, 0, 0
    while True:
        item = next(batches_left, None)
        began = item is not None and epoch is not None and item[0] != epoch
        go_on, turned = agree(world_size, item is not None, began)
        if not go_on:
            break
        batch_epoch, x, y = item
        if turned:
            report(step=steps, epoch=epoch + 1, test_accuracy=score())
        if batch_epoch != epoch:
            if is_chief and epoch is not None and epoch % 10 == 9:
                print(f"epoch {epoch + 1}: train loss {total / max(batches, 1):.4f} "
                      f"({rows} rows fed to this worker)", flush=True)
            epoch, total, batches, rows = batch_epoch, 0.0, 0, 0
        loss = step(model, optimizer, loss_fn, x, y)
        total, batches, rows, steps = total + loss, batches + 1, rows + len(y), steps + 1
        report(step=steps, train_loss=loss)
        if turned:
            checkpoint(epoch)
    if is_chief:
        print(f"epoch {(epoch or 0) + 1}: train loss {total / max(batches, 1):.4f} "
              f"({rows} rows fed to this worker; {feed.records_read} in all)", flush=True)
    report(step=steps, epoch=(epoch or 0) + 1)
    return steps


def train_local(model, train, local_batch, optimizer, loss_fn, is_chief, rank, world_size,
                epochs, seed, score):
    sampler = DistributedSampler(train, num_replicas=world_size, rank=rank,
                                 shuffle=True, seed=seed)
    loader = DataLoader(train, batch_size=local_batch, sampler=sampler)
    steps = 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        total, batches = 0.0, 0
        for x, y in loader:
            loss = step(model, optimizer, loss_fn, x, y)
            total, batches, steps = total + loss, batches + 1, steps + 1
            report(step=steps, train_loss=loss)
        if epoch < epochs - 1:
            report(step=steps, epoch=epoch + 1, test_accuracy=score())
        if is_chief and (epoch % 10 == 9 or epoch == epochs - 1):
            print(f"epoch {epoch + 1}/{epochs}: train loss {total / batches:.4f} "
                  f"({len(sampler)} examples on this worker)", flush=True)
    report(step=steps, epoch=epochs)
    return steps


if __name__ == "__main__":
    sys.exit(main())
