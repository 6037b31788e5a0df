"""torch's TCPStore under a flood of idle connections (issue 21, item 3), without meshrun.

    python bench/store_flood.py [--backend uv|legacy] [--idle 200] [--calls 8]

A server (as node 0 hosts the job's store), one client that keeps its connection (as a
node's watchdog does), then ``--idle`` plain sockets connected to the port that never send
a byte (a stranger, a scanner). After a second, the client's ``set`` + ``get`` of an
existing key is timed ``--calls`` times, 0.25 s apart. Prints one line of milliseconds.
"""

from __future__ import annotations

import argparse
import socket
import time
from datetime import timedelta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("uv", "legacy"), default="uv")
    parser.add_argument("--idle", type=int, default=200)
    parser.add_argument("--calls", type=int, default=8)
    args = parser.parse_args()
    from torch.distributed import TCPStore

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                      use_libuv=args.backend == "uv", timeout=timedelta(seconds=30))
    client = TCPStore("127.0.0.1", server.port, is_master=False,
                      timeout=timedelta(seconds=30))
    client.set("k", "v")
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(args.idle)]
    time.sleep(1.0)
    took = []
    for _ in range(args.calls):
        started = time.perf_counter()
        client.set("k", "v")
        client.get("k")
        took.append(round((time.perf_counter() - started) * 1000, 1))
        time.sleep(0.25)
    print(f"backend {args.backend}, {len(idle)} idle connections: set+get ms {took}")


if __name__ == "__main__":
    main()
