"""The host's own figures, which every result in bench/RESULTS.md is read against:
its CPUs, memcpy, read() of a page-cached file, the same file copied out of a
mapping, and fork+exec, measured in the same run as the bench that prints them.
Read and map of the same cached file tell the host kinds apart: where faulting
page-cache pages into a mapping is dear (some virtual machines), the mapping
runs at a fraction of read() (issue 19: 1.6-2.6 against 9.5-13 GB/s), and a
feeder that maps its input is bound by that.

    import host_figures
    print(host_figures.host_line())      # CPUs, clock, model, load
    print(host_figures.figures_line())   # memcpy, read(), map, fork+exec of 8 programs

or on its own: /usr/bin/python3 bench/host_figures.py
"""
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time


def host_line():
    cpus = os.cpu_count()
    model, mhz = "", ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            if line.startswith("cpu MHz") and not mhz:
                mhz = line.split(":", 1)[1].strip().split(".")[0]
    load = os.getloadavg()[0]
    return f"host: {cpus} CPUs @ {mhz} MHz ({model}), load {load:.1f} at start"


def read_limit(path):
    """Seconds to read() `path` into a reused 8 MiB buffer."""
    buffer = bytearray(8 << 20)
    view = memoryview(buffer)
    started = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(view):
            pass
    return time.perf_counter() - started


def memcpy_gbps(mib=256, reps=5):
    """GB/s of one copy between two buffers of `mib` MiB (NumPy's copyto when
    there is NumPy, else a bytearray slice assignment), best of `reps`."""
    size = mib << 20
    try:
        import numpy as np
        src, dst = np.ones(size, dtype=np.uint8), np.zeros(size, dtype=np.uint8)

        def copy():
            np.copyto(dst, src)
    except ImportError:
        src, dst = bytearray(b"\1") * size, bytearray(size)

        def copy():
            dst[:] = src
    copy()  # fault the pages in
    best = min(_timed(copy) for _ in range(reps))
    return size / best / 1e9


def map_limit(path):
    """Seconds to map `path`, copy it out into a reused 8 MiB buffer as its
    pages fault in, and unmap it: read_limit's work, through a mapping."""
    buffer = bytearray(8 << 20)
    started = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        mapping = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
        with memoryview(mapping) as view:
            for at in range(0, len(mapping), len(buffer)):
                piece = view[at:at + len(buffer)]
                buffer[:len(piece)] = piece
                piece.release()
        mapping.close()
    return time.perf_counter() - started


def file_gbps(mib=256, reps=5):
    """GB/s of read_limit() and of map_limit() on one page-cached file of
    `mib` MiB of random bytes, best of `reps` each."""
    with tempfile.NamedTemporaryFile(prefix="drover-host-read-") as f:
        chunk = os.urandom(1 << 20)
        for _ in range(mib):
            f.write(chunk)
        f.flush()
        read_limit(f.name)  # into the page cache
        rates = [(mib << 20) / min(limit(f.name) for _ in range(reps)) / 1e9
                 for limit in (read_limit, map_limit)]
    return tuple(rates)


def fork_exec_ms(n=8, reps=5):
    """Milliseconds to start n copies of /bin/true and wait for them (the
    start-up bench's floor), median of `reps`."""
    def once():
        children = [subprocess.Popen(["true"], stdin=subprocess.DEVNULL) for _ in range(n)]
        for child in children:
            child.wait()
    return statistics.median(_timed(once) for _ in range(reps)) * 1000


def figures_line():
    read, mapped = file_gbps()
    return (f"memcpy {memcpy_gbps():.1f} GB/s, read() of a page-cached file "
            f"{read:.1f} GB/s, copied out of a mapping of it {mapped:.1f} GB/s, "
            f"fork+exec of 8 programs {fork_exec_ms(8):.0f} ms")


def _timed(fn):
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


if __name__ == "__main__":
    print(host_line())
    print(figures_line())
    sys.exit(0)
