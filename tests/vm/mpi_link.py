#!/usr/bin/env python3
"""A remote shell for MPI launchers between the two-hosts guests (tests/vm/test_vm_mpi.py),
which run no ssh server. `mpi_link.py serve` on every guest runs the commands it is sent;
`mpi_link.py [-x ...] HOST CMD...` (what MPICH's Hydra calls with `-launcher rsh
-launcher-exec mpi_link.py`, as it would call rsh) sends CMD to HOST's server, relays its
output and exits with its code; `mpi_link.py stop HOST` ends a server. Only for the rig's
private link between two guests: it runs whatever it is sent."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

PORT = 17017
END = b"\0mpi_link rc "


def serve(port: int = PORT) -> int:
    with socket.create_server(("0.0.0.0", port), reuse_port=True) as srv:
        while True:
            conn, _ = srv.accept()
            with conn:
                req = json.loads(conn.makefile("rb").readline())
                if req.get("stop"):
                    return 0
                if not os.fork():  # one child per command: Hydra keeps its proxy running
                    srv.close()
                    p = subprocess.run(["sh", "-c", req["cmd"]], stdin=subprocess.DEVNULL,
                                       stdout=conn.fileno(), stderr=subprocess.STDOUT)
                    conn.sendall(END + str(p.returncode).encode() + b"\n")
                    os._exit(0)


def connect(host: str, wait_s: float = 240.0) -> socket.socket:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return socket.create_connection((host, PORT), timeout=wait_s)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def run(host: str, cmd: str) -> int:
    with connect(host) as s:
        s.settimeout(None)
        s.sendall(json.dumps({"cmd": cmd}).encode() + b"\n")
        # the server's last bytes are END and the code: hold back that many until EOF
        tail, keep = b"", len(END) + 16
        while chunk := s.recv(65536):
            tail += chunk
            if len(tail) > keep:
                sys.stdout.buffer.write(tail[:-keep])
                sys.stdout.flush()
                tail = tail[-keep:]
        out, sep, rc = tail.partition(END)
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
        return int(rc.strip() or b"255") if sep else 255


def main(argv: list[str]) -> int:
    if argv[:1] == ["serve"]:
        return serve()
    if argv[:1] == ["stop"]:
        with connect(argv[1], 10.0) as s:
            s.sendall(b'{"stop": true}\n')
        return 0
    while argv and argv[0].startswith("-"):  # rsh/ssh options a launcher may add (-x)
        argv = argv[1:]
    if len(argv) < 2:
        print("usage: mpi_link.py serve | stop HOST | [-x] HOST CMD...", file=sys.stderr)
        return 2
    return run(argv[0], " ".join(argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
