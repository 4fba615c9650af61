"""benchmarks/sim_workers.py -- simulated `kiln worker`s for benchmarks/bench_queue.sh: W threads
in one process, each with its own connection to Redis (RESP by hand, no client library), reading
jobs from the consumer group "workers" of a stream and answering each "ok" after sleeping S
seconds instead of measuring; every answered job is one line "worker start end" in --log.

    /usr/bin/python3 benchmarks/sim_workers.py --port P --key KEY --workers W --sleep S
        --log FILE --stop FILE
"""
import argparse
import os
import socket
import threading
import time


def cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.f = self.s.makefile("rb")

    def call(self, *args):
        self.s.sendall(cmd(*args))
        return self.read()

    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t in (b"+", b":"):
            return rest
        if t == b"-":
            raise RuntimeError(rest.decode())
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("bad reply %r" % line)


def worker(i, a, lock, log):
    c = Conn(a.port)
    name = "sim%d" % i
    while not os.path.exists(a.stop):
        r = c.call("XREADGROUP", "GROUP", "workers", name, "COUNT", "1", "BLOCK", "1000",
                   "STREAMS", a.key, ">")
        if not r:
            continue
        eid, fields = r[0][1][0]
        f = dict(zip(fields[0::2], fields[1::2]))
        start = time.time()
        time.sleep(a.sleep)
        s = str(a.sleep)
        c.call("XADD", f[b"reply_to"], "*", "v", "1", "id", f[b"id"], "worker", name, "error",
               "ok", "time_s", s, "stddev_s", "0", "nrepeat", "1", "times", s, "build_s", "0",
               "run_s", s, "max_err", "0", "msg", "")
        c.call("XACK", a.key, "workers", eid)
        c.call("XDEL", a.key, eid)
        with lock:
            log.write("%d %.3f %.3f\n" % (i, start, time.time()))
            log.flush()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--workers", type=int, default=64)
    p.add_argument("--sleep", type=float, default=5)
    p.add_argument("--log", required=True)
    p.add_argument("--stop", required=True)
    a = p.parse_args()
    try:
        Conn(a.port).call("XGROUP", "CREATE", a.key, "workers", "0", "MKSTREAM")
    except RuntimeError as e:
        if "BUSYGROUP" not in str(e):
            raise
    lock = threading.Lock()
    with open(a.log, "a") as log:
        ts = [threading.Thread(target=worker, args=(i, a, lock, log), daemon=True)
              for i in range(a.workers)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


if __name__ == "__main__":
    main()
