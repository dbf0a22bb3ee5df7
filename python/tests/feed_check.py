"""What a fed program saw, from testing/feed_reader's files (PREFIX.<executor
id>: "<epoch>\t<record>" per record, "#round R" and "#commit" marks), and the
check that every record was consumed once relative to the commits. Shared by
the feed tests of the built-in rendezvous (src/cli/tests) and of etcd
(tests/etcd)."""
import collections
import os
import struct


def write_csv(path, first, count):
    with open(path, "w") as f:
        for i in range(first, first + count):
            f.write(f"{i},payload-{i}\n")


def masked_crc(data):
    """TFRecord's masked CRC-32C, bit by bit (small inputs only)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(data, corrupt=False):
    """One TFRecord record holding `data`; `corrupt`: its data CRC is wrong."""
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", masked_crc(length)) + data +
            struct.pack("<I", 0 if corrupt else masked_crc(data)))


def write_good_then_bad_tfrecords(path, good):
    """`good` records of 100 bytes, then one whose CRC is wrong (record `good`)."""
    data = b"x" * 100
    with open(path, "wb") as f:
        f.write(tfrecord(data) * good + tfrecord(data, corrupt=True))


def records_in_round(path, number):
    """How many records the reader that wrote `path` read in round `number`."""
    count, current = 0, None
    with open(path) as f:
        for line in f:
            if line.startswith("#round"):
                current = int(line.split()[1])
            elif not line.startswith("#") and current == number:
                count += 1
    return count


def consumed_by_epoch(prefix, final_round=None):
    """What the programs consumed, per epoch: the records of each round up to
    its last "#commit" (a round that was killed loses the rest, which the
    next round must feed again), and every record of a node's last round (the
    run succeeded: its program read to the end). With `final_round` (elastic
    runs, where a lost node's file ends in an earlier round), only that
    round's sections count as read to the end."""
    by_epoch = collections.defaultdict(collections.Counter)
    directory, stem = os.path.split(str(prefix))
    for name in os.listdir(directory):
        if not name.startswith(stem + "."):
            continue
        rounds = []
        with open(os.path.join(directory, name)) as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("#round"):
                    rounds.append({"committed": [], "pending": [],
                                   "number": int(line.split()[1])})
                elif line == "#commit":
                    rounds[-1]["committed"] += rounds[-1]["pending"]
                    rounds[-1]["pending"] = []
                elif line.startswith("#"):
                    continue  # "#held" and other marks
                else:
                    epoch, record = line.split("\t", 1)
                    rounds[-1]["pending"].append((int(epoch), int(record.split(",", 1)[0])))
        for i, r in enumerate(rounds):
            to_the_end = (i == len(rounds) - 1 if final_round is None
                          else r["number"] == final_round)
            kept = r["committed"] + (r["pending"] if to_the_end else [])
            for epoch, record in kept:
                by_epoch[epoch][record] += 1
    return by_epoch


def assert_each_record_once(by_epoch, total, epochs, context=()):
    """Every record 0..total-1 counted exactly once in each of `epochs`."""
    assert sorted(by_epoch) == list(range(epochs)), context
    for epoch, counts in by_epoch.items():
        missing = set(range(total)) - set(counts)
        twice = [i for i, n in counts.items() if n != 1]
        assert not missing and not twice, (context, epoch, sorted(missing)[:10], twice[:10])
