"""A training program for the commit test: reads its node's feed, appends
"<epoch>\\t<record>" lines to OUT.<rank> after a "#round R" line, commits
every two batches (then writes "#commit"), and, on RANK=VICTIM in round 0,
SIGKILLs itself once it has read DIE_AFTER records.

    commit_reader.py OUT VICTIM DIE_AFTER"""
import os
import signal
import sys

import drover

out, victim, die_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rank = int(os.environ["RANK"])
round_number = int(os.environ.get("DROVER_RESTART_COUNT", "0"))
feed = drover.DataFeed(train_mode=True)
seen = batches = 0
with open(f"{out}.{rank}", "a") as f:
    f.write(f"#round {round_number}\n")
    f.flush()
    while not feed.should_stop():
        batch = feed.next_batch(50)
        if not batch:
            break
        f.writelines(f"{feed.epoch}\t{record.decode()}\n" for record in batch)
        f.flush()
        seen += len(batch)
        if rank == victim and round_number == 0 and seen >= die_after:
            os.kill(os.getpid(), signal.SIGKILL)
        batches += 1
        if batches % 2 == 0:
            # A stop (SIGTERM) between the driver recording the commit and
            # the "#commit" line would make the file understate what was
            # committed: it waits until the line is written.
            stops = {signal.SIGTERM, signal.SIGINT}
            signal.pthread_sigmask(signal.SIG_BLOCK, stops)
            feed.commit()
            f.write("#commit\n")
            f.flush()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
