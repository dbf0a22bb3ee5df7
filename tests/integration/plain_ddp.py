"""A synchronous data-parallel program as people write it: DDP over gloo, one
step per batch from drover's feed, no torch Join. It finishes only if every
worker takes the same number of steps each epoch; it prints
"epoch E: N records" per epoch."""
import collections
import sys

import drover
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo", timeout=__import__("datetime").timedelta(seconds=120))
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(1, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-6)
feed = drover.context().get_data_feed(train_mode=True, schema=[("id", "float32"),
                                                               ("value", "float32")])
per_epoch = collections.Counter()
while not feed.should_stop():
    batch = feed.next_batch(16)
    if len(batch["id"]) == 0:
        break
    per_epoch[feed.epoch] += len(batch["id"])
    x = torch.from_numpy(batch["id"]).unsqueeze(1)
    optimizer.zero_grad()
    model(x).sum().backward()  # the gradient all-reduce every worker must join
    optimizer.step()
for epoch in sorted(per_epoch):
    print(f"epoch {epoch}: {per_epoch[epoch]} records", flush=True)
dist.barrier()
sys.stdout.flush()
