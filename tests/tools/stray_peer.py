#!/usr/bin/env python3
"""Stray connections against a launch's listeners, as a port scanner or another job would
make them: to the rendezvous port (retried until it listens) and, with --scan PPID, to every
TCP socket that the children of PPID listen on. Each listener gets: a silent connection, an
HTTP request, a hello without a MAC, a hello MACed with another secret, a hello MACed with the
right secret over another connection's (old) nonce, and the right secret on the other channel.
None may ever get the listener's proof back.

usage: stray_peer.py PORT SECRET [--scan PID] [--ready FILE [--ready-after N]] [--seconds S]
--scan attacks the listeners of PID's descendants too; --ready FILE is created once the
strays of N listeners (default 1) are connected, queued ahead of any rank that comes later.
Prints one line per listener: "PORT: N strays, C connected, R refused, P proofs" (and to
stderr why a connection could not be made); exit status 0 when no stray got a proof."""
import hashlib
import hmac
import os
import socket
import struct
import sys
import threading
import time

MAGIC, VERSION, HDR = 0x44495452, 2, 20
HELLO, ERROR, CHALLENGE, PROOF = 1, 3, 6, 7
CHANNELS = {1: b"rendezvous", 2: b"mesh"}


def frame(t, a, b, body=b""):
    return struct.pack(">IHHiiI", MAGIC, VERSION, t, a, b, len(body)) + body


def read_frame(s):
    h = b""
    while len(h) < HDR:
        k = s.recv(HDR - len(h))
        if not k:
            return None
        h += k
    magic, ver, t, a, b, n = struct.unpack(">IHHiiI", h)
    if magic != MAGIC or n > 8192:
        return None
    body = b""
    while len(body) < n:
        k = s.recv(n - len(body))
        if not k:
            return None
        body += k
    return t, a, b, body


def hello(secret, channel, server_nonce, rank=1, world=2, extra=128):
    cn = os.urandom(32)
    mac = b"\0" * 32
    if secret is not None:
        msg = (b"ditrun job secret v2\0" + CHANNELS[channel] + b"\0hello\0" + server_nonce + cn +
               struct.pack(">iiI", rank, world, extra))
        mac = hmac.new(secret, msg, hashlib.sha256).digest()
    return frame(HELLO, rank, world, struct.pack(">I", extra) + cn + mac)


def connect(port, until):
    err = None
    while time.time() < until:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
            s.settimeout(8)
            return s
        except OSError as e:
            err = e
            time.sleep(0.01)
    print(f"{port}: cannot connect: {err}", file=sys.stderr)
    return None


READY = {"lock": threading.Lock(), "count": 0, "file": None, "after": 1}


def attack(port, secret, until, report):
    """All connections first (they queue ahead of the real ranks), then each plays its part."""
    socks = [connect(port, until) for _ in range(7)]
    with READY["lock"]:
        READY["count"] += 1
        if READY["file"] and READY["count"] == READY["after"]:
            open(READY["file"], "w").close()
    stats = {"strays": 6, "connected": sum(1 for s in socks[1:] if s), "refused": 0, "proofs": 0}
    silent, keep, http, nomac, wrong, replay, other = socks

    def challenge(s):
        try:
            f = s and read_frame(s)
        except OSError:
            return None
        return f if f and f[0] == CHALLENGE else None

    def judge(s):
        """1 when the listener closed it without a proof."""
        try:
            while True:
                f = read_frame(s)
                if f is None:
                    return 1
                if f[0] == PROOF:
                    stats["proofs"] += 1
                    return 0
        except OSError as e:
            return 0 if isinstance(e, socket.timeout) else 1

    old = challenge(keep)
    if http:
        http.sendall(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n")
    for s, sec, use_old, flip in ((nomac, None, False, False), (wrong, b"the secret of some other job....", False, False),
                                  (replay, secret, True, False), (other, secret, False, True)):
        c = challenge(s)
        if c and (not use_old or old):
            ch = c[1] if not flip else 3 - c[1]
            s.sendall(hello(sec, ch, (old or c)[3] if use_old else c[3]))
    for s in (http, nomac, wrong, replay, other):
        if s:
            stats["refused"] += judge(s)
    stats["refused"] += 1 if silent and judge_silent(silent) else 0
    for s in socks:
        if s:
            s.close()
    report.append((port, stats))


def judge_silent(s):
    try:
        while True:
            f = read_frame(s)
            if f is None:
                return True
            if f[0] == PROOF:
                return False
    except OSError:
        return True


def descendants(root):
    parent = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    parent[int(p)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [root]
    while todo:
        q = todo.pop()
        kids = [p for p, pp in parent.items() if pp == q and p != os.getpid()]
        out += kids
        todo += kids
    return out


def listening_ports(pids):
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(int(link[8:-1]))
        except OSError:
            pass
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                for line in list(f)[1:]:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[9]) in inodes:
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


def main():
    port, secret = int(sys.argv[1]), sys.argv[2].encode()
    args = sys.argv[3:]
    scan = int(args[args.index("--scan") + 1]) if "--scan" in args else None
    READY["file"] = args[args.index("--ready") + 1] if "--ready" in args else None
    READY["after"] = int(args[args.index("--ready-after") + 1]) if "--ready-after" in args else 1
    seconds = float(args[args.index("--seconds") + 1]) if "--seconds" in args else 10
    until = time.time() + seconds
    report, threads, seen = [], [], {port}
    t = threading.Thread(target=attack, args=(port, secret, until, report))
    t.start()
    threads.append(t)
    while scan and time.time() < until:
        kids = descendants(scan)
        if not kids and time.time() > until - seconds + 2:
            break
        for p in listening_ports(kids) - seen:
            seen.add(p)
            t = threading.Thread(target=attack, args=(p, secret, until, report))
            t.start()
            threads.append(t)
        if not t.is_alive() and not kids:
            break
        time.sleep(0.005)  # leave the attacks their share of the interpreter
    for t in threads:
        t.join()
    proofs = 0
    for p, s in sorted(report):
        print(f"{p}: {s['strays']} strays, {s['connected']} connected, {s['refused']} refused, {s['proofs']} proofs")
        proofs += s["proofs"]
    return 1 if proofs else 0


if __name__ == "__main__":
    sys.exit(main())
