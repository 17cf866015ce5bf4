#!/usr/bin/env python3
"""Start-up and stop time of a hookd binary: `python3 bench/startup.py PATH/TO/hookd`.

Ten new data directories, each started twice (new, then existing); the time from exec to
the first /healthz 200, and from SIGTERM to exit. Ports 17700-17702 on loopback.
"""
import os, socket, subprocess, sys, tempfile, time, statistics
exe = sys.argv[1]
def once(data):
    t0 = time.monotonic()
    p = subprocess.Popen([exe, "serve", "--data-dir", data, "--grpc-addr", "127.0.0.1:17700",
                          "--http-addr", "127.0.0.1:17701", "--ingest-addr", "127.0.0.1:17702",
                          "--log-level", "warn"], stderr=subprocess.DEVNULL)
    deadline = t0 + 30
    while time.monotonic() < deadline:
        try:
            s = socket.create_connection(("127.0.0.1", 17701), timeout=1)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            r = s.recv(100); s.close()
            if r.startswith(b"HTTP/1.1 200"):
                break
        except OSError:
            pass
        time.sleep(0.002)
    ready = time.monotonic() - t0
    t1 = time.monotonic()
    p.terminate(); p.wait()
    stop = time.monotonic() - t1
    return ready * 1e3, stop * 1e3
fresh, again, stops = [], [], []
for i in range(10):
    d = tempfile.mkdtemp()
    r, s = once(d); fresh.append(r); stops.append(s)
    r, s = once(d); again.append(r); stops.append(s)
f = lambda v: f"median {statistics.median(v):.1f} ms, min {min(v):.1f}, max {max(v):.1f}"
print("start to /healthz 200, new data dir:", f(fresh))
print("start to /healthz 200, existing empty store:", f(again))
print("SIGTERM to exit, idle:", f(stops))
