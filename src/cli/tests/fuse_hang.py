"""A FUSE file system of one file whose reads never come back, for tests (root only).

usage: fuse_hang.py MOUNTPOINT SIZE
       fuse_hang.py MOUNTPOINT --serve FILE

Mounts MOUNTPOINT holding `data`, SIZE bytes, opened with direct I/O, and
answers every request but READ, which it takes off /dev/fuse and never
answers: the reader then waits in the kernel uninterruptibly, SIGKILL
included, what a read from a hung network file system does. Prints
"ready" once mounted (else "mount: WHY") and "read" at each READ it holds.
On SIGTERM or the end of stdin it unmounts and exits, which closes
/dev/fuse: the kernel then fails every held read, so the readers end.

With --serve FILE, `data` is FILE's bytes and every READ is answered: a
healthy file system whose files are opened with direct I/O (as network and
FUSE file systems mounted with direct_io open them), which refuses shared
mappings of them.
"""
import ctypes
import errno
import os
import signal
import struct
import sys
import threading

FUSE_LOOKUP, FUSE_GETATTR, FUSE_OPEN, FUSE_READ, FUSE_RELEASE = 1, 3, 14, 15, 18
FUSE_FLUSH, FUSE_INIT, FUSE_OPENDIR, FUSE_RELEASEDIR, FUSE_INTERRUPT = 25, 26, 27, 29, 36
FOPEN_DIRECT_IO = 1
IN_HEADER = struct.Struct("<IIQQIIII")  # len, opcode, unique, nodeid, uid, gid, pid, padding
OUT_HEADER = struct.Struct("<IiQ")  # len, error, unique
FILE_NODE = 2


def attr(node, size):
    mode = 0o040755 if node == 1 else 0o100644
    # ino size blocks atime mtime ctime atimensec mtimensec ctimensec mode nlink uid gid rdev
    # blksize flags
    return struct.pack("<QQQQQQIIIIIIIIII", node, size, (size + 511) // 512, 0, 0, 0, 0, 0, 0,
                       mode, 1, 0, 0, 0, 4096, 0)


def reply(fd, unique, body=b"", error=0):
    os.write(fd, OUT_HEADER.pack(OUT_HEADER.size + len(body), -error, unique) + body)


def serve(fd, size, served=None):
    while True:
        try:
            request = os.read(fd, (1 << 20) + 4096)  # above max_write + its header
        except OSError as e:
            if e.errno in (errno.ENODEV, errno.EBADF):
                return  # unmounted or closed
            if e.errno == errno.EINTR:
                continue
            raise
        _, opcode, unique, node, *_ = IN_HEADER.unpack_from(request)
        body = request[IN_HEADER.size:]
        if opcode == FUSE_INIT:
            major, minor = struct.unpack_from("<II", body)
            # major minor max_readahead flags max_background congestion_threshold max_write
            # time_gran max_pages map_alignment flags2 unused[7]
            reply(fd, unique, struct.pack("<IIIIHHIIHHI7I", 7, min(minor, 31), 0, 0, 16, 12,
                                          128 << 10, 1, 0, 0, 0, *[0] * 7))
        elif opcode == FUSE_LOOKUP:
            if node == 1 and body.rstrip(b"\0") == b"data":
                reply(fd, unique, struct.pack("<QQQQII", FILE_NODE, 0, 0, 0, 0, 0) +
                      attr(FILE_NODE, size))
            else:
                reply(fd, unique, error=errno.ENOENT)
        elif opcode == FUSE_GETATTR:
            reply(fd, unique, struct.pack("<QII", 0, 0, 0) + attr(node, size))
        elif opcode in (FUSE_OPEN, FUSE_OPENDIR):
            reply(fd, unique, struct.pack("<QII", 0, FOPEN_DIRECT_IO, 0))
        elif opcode == FUSE_READ and served is not None:
            _, offset, length = struct.unpack_from("<QQI", body)  # fh offset size
            reply(fd, unique, os.pread(served, length, offset))
        elif opcode == FUSE_READ:
            print("read", flush=True)  # held: never answered
        elif opcode in (FUSE_RELEASE, FUSE_RELEASEDIR, FUSE_FLUSH):
            reply(fd, unique)
        elif opcode == FUSE_INTERRUPT:
            pass  # a held READ stays held
        else:
            reply(fd, unique, error=errno.ENOSYS)


def main():
    mountpoint = sys.argv[1]
    served = None
    if sys.argv[2] == "--serve":
        served = os.open(sys.argv[3], os.O_RDONLY)
        size = os.fstat(served).st_size
    else:
        size = int(sys.argv[2])
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open("/dev/fuse", os.O_RDWR)
    options = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"drover-fuse-hang", mountpoint.encode(), b"fuse", 0, options) != 0:
        print(f"mount: {os.strerror(ctypes.get_errno())}", flush=True)
        return 1
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    threading.Thread(target=serve, args=(fd, size, served), daemon=True).start()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    print("ready", flush=True)
    done.wait()
    libc.umount2(mountpoint.encode(), 2)  # MNT_DETACH: the held reads may still hold it
    # Our end of /dev/fuse goes with the process (a thread blocked reading it
    # keeps a close() from releasing it): the kernel aborts the connection,
    # and every held read fails.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
