#!/usr/bin/env python3
"""A bounded load and fault client for `ditrun serve` (stdlib only: http.client, threads).

Checks, against a server started by tests/integration/serve.sh (test hooks: a per-step delay and a
seed that hangs the worker): auth (401), body limit (413), bad JSON (400), a load of --count
requests with mixed deadlines and some cancels from several threads (every accepted job ends in a
final state with a reason, none lost or duplicated, every succeeded result byte-identical to
`ditrun generate --out` for its seed), 429 with Retry-After when the queue is full, 504 for an
impossible deadline, the event stream, a worker killed with SIGKILL mid-job and a hanging worker
(both recovered: the job fails with the reason, the next one succeeds), /metrics and the page."""
import argparse
import base64
import http.client
import json
import os
import random
import signal
import struct
import sys
import threading
import time

FINAL = {"succeeded", "failed", "cancelled", "expired"}


class Client:
    def __init__(self, port, token):
        self.port, self.token = port, token

    def call(self, method, path, body=None, token=True, raw=False, binary=False):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        headers = {"Content-Type": "application/octet-stream" if binary else "application/json"}
        if token and self.token:
            headers["Authorization"] = "Bearer " + (token if isinstance(token, str) else self.token)
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        data = r.read()
        retry = r.getheader("Retry-After")
        c.close()
        if raw:
            return r.status, data, retry
        try:
            return r.status, json.loads(data) if data else None, retry
        except ValueError:
            return r.status, data, retry


def check(cond, what):
    if not cond:
        print("serve_client: FAILED: " + what, file=sys.stderr)
        sys.exit(1)


def body(inputs, **kw):
    kw["inputs"] = inputs
    return json.dumps(kw)


def wait_final(cl, jid, limit=60):
    t = time.time()
    while time.time() - t < limit:
        st, j, _ = cl.call("GET", "/v1/jobs/" + jid)
        check(st == 200, "GET %s: %d" % (jid, st))
        if j["state"] in FINAL:
            return j
        time.sleep(0.01)
    check(False, "%s did not end within %d s" % (jid, limit))


def wait_running(cl, jid, step=1):
    for _ in range(3000):
        st, j, _ = cl.call("GET", "/v1/jobs/" + jid)
        if j["state"] == "running" and j["step"] >= step:
            return
        check(j["state"] in ("queued", "running"), "%s ended before it ran: %s" % (jid, j))
        time.sleep(0.01)
    check(False, jid + " never ran")


def security(cl, inputs, max_body):
    st, j, _ = cl.call("POST", "/v1/videos", body(inputs, seed=1, steps=3), token=False)
    check(st == 401, "no token: expected 401, found %d" % st)
    st, _, _ = cl.call("GET", "/status", token="wrong" + cl.token)
    check(st == 401, "wrong token: expected 401, found %d" % st)
    st, _, _ = cl.call("GET", "/health", token=False)
    check(st == 200, "/health needs no token")
    st, j, _ = cl.call("POST", "/v1/videos", "x" * (max_body + 1))
    check(st == 413, "oversized body: expected 413, found %d" % st)
    for bad, field in (('{"seed": 1', "request"), (body(inputs, stesp=3), "stesp"), (body("AAA", seed=1), "inputs"),
                       (body(inputs, steps=0), "steps"), (body(inputs, bundle="../../etc/passwd"), "no such bundle")):
        st, j, _ = cl.call("POST", "/v1/videos", bad)
        check(st in (400, 404) and field in j["error"]["message"], "bad request (%s): %d %s" % (field, st, j))
    st, j, _ = cl.call("POST", "/v1/images", body(inputs, seed=1))
    check(st == 404 and "/v1/videos" in j["error"]["message"], "a video bundle on /v1/images: %d %s" % (st, j))


def load(cl, inputs, refs, count, threads):
    """count requests from `threads` threads: mixed deadlines, one in eight cancelled."""
    accepted, lock, errors = [], threading.Lock(), []

    def worker(k):
        rnd = random.Random(k)
        for i in range(k, count, threads):
            seed = 1 + i % len(refs)
            kw = {"seed": seed, "steps": 3}
            d = rnd.choice([None, None, 60000, 40, 5])
            if d:
                kw["deadline_ms"] = d
            while True:
                st, j, retry = cl.call("POST", "/v1/videos", body(inputs, **kw))
                if st != 429:
                    break
                time.sleep(min(float(retry), 0.05))
            if st == 504:
                continue
            if st != 201:
                errors.append("POST: %d %s" % (st, j))
                return
            with lock:
                accepted.append((j["id"], seed))
            if i % 8 == 0:
                st, _, _ = cl.call("DELETE", "/v1/jobs/" + j["id"])
                if st not in (200, 202, 409):
                    errors.append("DELETE: %d" % st)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(not errors, "load: " + "; ".join(errors[:3]))
    ids = [a for a, _ in accepted]
    check(len(ids) == len(set(ids)), "duplicated job ids")
    states = {}
    for jid, seed in accepted:
        j = wait_final(cl, jid)
        states[j["state"]] = states.get(j["state"], 0) + 1
        if j["state"] == "succeeded":
            st, data, _ = cl.call("GET", "/v1/jobs/%s/result" % jid, raw=True)
            check(st == 200 and data == refs[seed - 1], "%s (seed %d): the result differs from ditrun generate --out" % (jid, seed))
        else:
            check(j.get("error"), "%s ended %s without a reason" % (jid, j["state"]))
        if j["state"] == "expired":
            st, _, _ = cl.call("GET", "/v1/jobs/%s/result" % jid)
            check(st == 504, "%s expired: result GET expected 504, found %d" % (jid, st))
    check(states.get("succeeded", 0) > count // 4, "load: too few succeeded: %s" % states)
    print("serve_client: load: %d requests, %d accepted: %s" % (count, len(ids), states))
    return len(ids)


def queue_full(cl, inputs, max_queued):
    ids, got429 = [], None
    for i in range(max_queued + 3):
        st, j, retry = cl.call("POST", "/v1/videos", body(inputs, seed=1, steps=40))
        if st == 429:
            got429 = retry
            break
        check(st == 201, "filling the queue: %d %s" % (st, j))
        ids.append(j["id"])
    check(got429 is not None and int(got429) >= 1, "a full queue: expected 429 with Retry-After")
    for jid in ids:
        cl.call("DELETE", "/v1/jobs/" + jid)
    for jid in ids:
        j = wait_final(cl, jid)
        check(j["state"] in ("cancelled", "succeeded"), "%s after DELETE: %s" % (jid, j))
    st, j, _ = cl.call("POST", "/v1/videos", body(inputs, seed=1, steps=200, deadline_ms=50))
    check(st == 504 and "cannot be met" in j["error"]["message"], "impossible deadline: expected 504, found %d %s" % (st, j))
    return len(ids)


def expire(cl, inputs, slow_seed):
    """A job slower than the estimate expires while running (stopped at a step); one queued
    behind it expires while queued; their results answer 504."""
    # Deadlines from the server's own per-step estimate (a sanitizer build's steps are slower): the
    # slow job fits its budget by the estimate (twice over) but its steps take 20 times as long;
    # the job behind it fits behind it by the estimate (23 steps) and ends before the slow one does.
    st, s, _ = cl.call("GET", "/status")
    step_ms = max(1000 * s["bundles"][0]["step_s"], 5.0)
    st, a, _ = cl.call("POST", "/v1/videos", body(inputs, seed=slow_seed, steps=20, deadline_ms=int(40 * step_ms)))
    check(st == 201, "POST of the slow job: %d %s" % (st, a))
    st, b, _ = cl.call("POST", "/v1/videos", body(inputs, seed=1, steps=3, deadline_ms=int(30 * step_ms)))
    check(st == 201, "POST of the job behind it: %d %s" % (st, b))
    fa, fb = wait_final(cl, a["id"]), wait_final(cl, b["id"])
    check(fa["state"] == "expired" and "deadline" in fa["error"] and 0 < fa["step"] < 20, "expired while running: %s" % fa)
    check(fb["state"] == "expired" and "while queued" in fb["error"], "expired while queued: %s" % fb)
    for j in (fa, fb):
        st, _, _ = cl.call("GET", "/v1/jobs/%s/result" % j["id"])
        check(st == 504, "result of an expired job: expected 504, found %d" % st)
    return 2


def events(cl, inputs, ref):
    st, j, _ = cl.call("POST", "/v1/videos", body(inputs, seed=1, steps=3))
    check(st == 201, "POST for events")
    st, data, _ = cl.call("GET", "/v1/jobs/%s/events" % j["id"], raw=True)
    text = data.decode()
    check(st == 200 and text.count("event: step") == 3 and "event: done" in text, "event stream: %s" % text)
    return 1


def binary_form(cl, inputs, ref):
    """The binary form (the safetensors inputs as the body, the options in the query) gives the JSON
    form's result; its options are typed as the JSON form's, a bad one refused naming it."""
    raw = base64.b64decode(inputs)
    st, j, _ = cl.call("POST", "/v1/videos?seed=1&steps=3", raw, binary=True)
    check(st == 201, "binary POST: %d %s" % (st, j))
    e = wait_final(cl, j["id"])
    st, data, _ = cl.call("GET", "/v1/jobs/%s/result" % j["id"], raw=True)
    check(e["state"] == "succeeded" and data == ref, "the binary form's result equals generate --out: %s" % e)
    for q, field in (("seed=1&steps=zero", "steps"), ("seed=1&stepz=3", "stepz"), ("inputs=x", "inputs")):
        st, r, _ = cl.call("POST", "/v1/videos?" + q, raw, binary=True)
        check(st == 400 and field in r["error"]["message"], "binary POST ?%s: %d %s" % (q, st, r))
    st, r, _ = cl.call("POST", "/v1/videos?seed=1", raw[:-7], binary=True)
    check(st == 400 and "safetensors" in r["error"]["message"], "binary POST of a cut body: %d %s" % (st, r))
    return 1


def png_size(data):
    """(width, height) of a PNG's IHDR; None when the bytes do not start as a PNG."""
    if len(data) < 24 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


def latents_shape(st_bytes):
    """The shape of the latents in a generate --out safetensors file."""
    n = struct.unpack("<Q", st_bytes[:8])[0]
    header = json.loads(st_bytes[8:8 + n])
    shapes = [v["shape"] for k, v in header.items() if k != "__metadata__"]
    check(len(shapes) == 1, "one tensor in the result: %s" % list(header))
    return shapes[0]


def sse_events(text):
    """[(event, data)] of a server-sent event stream."""
    out = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":") and ": " in line)
        if "event" in lines:
            out.append((lines["event"], lines.get("data", "")))
    return out


def previews(cl, inputs, slow_seed, ref, preview_ref):
    """A job with preview_every=1 over 3 steps (the slow seed: 20 times the test's step delay, so the
    stream sees each preview): a preview event after each step event, /preview the last one (the
    bytes generate --preview writes for its step 3, the latents' size times the fallback's upsample),
    its result byte-identical to generate --out and to the same job without previews; the 404s and
    a bad preview_every refused naming it."""
    st, j, _ = cl.call("POST", "/v1/videos", body(inputs, seed=slow_seed, steps=3, preview_every=1))
    check(st == 201 and j["preview_every"] == 1 and j["preview_step"] == 0, "POST with previews: %d %s" % (st, j))
    st, e, _ = cl.call("GET", "/v1/jobs/%s/preview" % j["id"])
    check(st == 404 and e["error"]["code"] == "no_preview" and "no preview yet" in e["error"]["message"],
          "a preview before the first: %d %s" % (st, e))
    st, data, _ = cl.call("GET", "/v1/jobs/%s/events" % j["id"], raw=True)
    ev = sse_events(data.decode())
    kinds = [k for k, _ in ev]
    check(st == 200 and kinds == ["step", "preview"] * 3 + ["done"], "event stream with previews: %s" % kinds)
    pngs = []
    for k, (kind, d) in enumerate(ev[1:6:2]):
        p = json.loads(d)
        check(p["step"] == k + 1 and sorted(p) == ["png", "step"], "preview event %d: step %s" % (k + 1, p["step"]))
        pngs.append(base64.b64decode(p["png"], validate=True))
    shape = latents_shape(ref)  # [B, C, F, h, w]; a bundle without a VAE stage: the fallback's 8x
    want = (shape[4] * 8 * min(shape[2], 4), shape[3] * 8)
    check(all(png_size(p) == want for p in pngs), "preview PNGs: %s, expected %s" % ([png_size(p) for p in pngs], want))
    st, png, _ = cl.call("GET", "/v1/jobs/%s/preview" % j["id"], raw=True)
    check(st == 200 and png == pngs[-1] and png == preview_ref, "/preview: %d, the last event's PNG and generate --preview's step 3" % st)
    check(wait_final(cl, j["id"])["preview_step"] == 3, "preview_step after the job")
    st, with_previews, _ = cl.call("GET", "/v1/jobs/%s/result" % j["id"], raw=True)
    st2, p, _ = cl.call("POST", "/v1/videos", body(inputs, seed=slow_seed, steps=3))
    check(st2 == 201 and "preview_step" not in p, "POST without previews: %d %s" % (st2, p))
    check(wait_final(cl, p["id"])["state"] == "succeeded", "the job without previews")
    st2, without, _ = cl.call("GET", "/v1/jobs/%s/result" % p["id"], raw=True)
    check(st == 200 and with_previews == without == ref, "the result with previews equals the one without and generate --out")
    st, e, _ = cl.call("GET", "/v1/jobs/%s/preview" % p["id"])
    check(st == 404 and "'preview_every'" in e["error"]["message"], "the preview of a job without previews: %d %s" % (st, e))
    for bad in (body(inputs, seed=1, preview_every=0), body(inputs, seed=1, preview_every="2"), body(inputs, seed=1, preview_every=1.5)):
        st, e, _ = cl.call("POST", "/v1/videos", bad)
        check(st == 400 and "preview_every" in e["error"]["message"], "a bad preview_every: %d %s" % (st, e))
    st, e, _ = cl.call("POST", "/v1/videos?seed=1&preview_every=0", base64.b64decode(inputs), binary=True)
    check(st == 400 and "preview_every" in e["error"]["message"], "a bad preview_every in the query: %d %s" % (st, e))
    print("serve_client: previews: 3 preview events, /preview %dx%d, the result unchanged" % want)
    return 2


def refused_options(cl, inputs):
    """A job whose options generate refuses fails with generate's own message."""
    st, j, _ = cl.call("POST", "/v1/videos", body(inputs, seed=1, steps=3, step_cache="every:2"))
    check(st == 201, "POST with a bad step cache: %d" % st)
    e = wait_final(cl, j["id"])
    check(e["state"] == "failed" and "every:2" in e["error"] and "cadence:N" in e["error"],
          "a refused job's reason carries generate's message: %s" % e)
    return 1


def retention(cl, inputs, refs):
    """A server started with --keep-results 1: the older of two results is dropped (410, saying why),
    the newer one is served."""
    ids = []
    for seed in (1, 2):
        st, j, _ = cl.call("POST", "/v1/videos", body(inputs, seed=seed, steps=3, preview_every=1))
        check(st == 201, "POST for retention: %d" % st)
        check(wait_final(cl, j["id"])["state"] == "succeeded", "retention job %d" % seed)
        ids.append(j["id"])
    st, e, _ = cl.call("GET", "/v1/jobs/%s/result" % ids[0])
    check(st == 410 and "--keep-results" in json.dumps(e), "the dropped result: %d %s" % (st, e))
    st, e, _ = cl.call("GET", "/v1/jobs/%s/preview" % ids[0])
    check(st == 410 and "--keep-results" in json.dumps(e), "the dropped preview: %d %s" % (st, e))
    st, data, _ = cl.call("GET", "/v1/jobs/%s/result" % ids[1], raw=True)
    check(st == 200 and data == refs[1], "the kept result")
    st, png, _ = cl.call("GET", "/v1/jobs/%s/preview" % ids[1], raw=True)
    check(st == 200 and png_size(png), "the kept preview: %d" % st)
    print("serve_client: retention: the older result and preview dropped (410), the newer served")


def kill_worker(cl, inputs, ref):
    st, j, _ = cl.call("POST", "/v1/videos", body(inputs, seed=1, steps=100))
    wait_running(cl, j["id"], 2)
    st, s, _ = cl.call("GET", "/status")
    pid = s["worker"]["pid"]
    os.kill(pid, signal.SIGKILL)
    f = wait_final(cl, j["id"])
    check(f["state"] == "failed" and "crashed" in f["error"] and "signal 9" in f["error"], "killed worker: %s" % f)
    st, j2, _ = cl.call("POST", "/v1/videos", body(inputs, seed=1, steps=3))
    f = wait_final(cl, j2["id"])
    st, data, _ = cl.call("GET", "/v1/jobs/%s/result" % j2["id"], raw=True)
    check(f["state"] == "succeeded" and data == ref, "the job after the kill: %s" % f)
    st, s, _ = cl.call("GET", "/status")
    check(s["worker"]["pid"] != pid and s["ready"], "a new worker after the kill: %s" % s["worker"])
    return 2


def hang(cl, inputs, ref, hang_seed):
    st, j, _ = cl.call("POST", "/v1/videos", body(inputs, seed=hang_seed, steps=3))
    wait_running(cl, j["id"], 0)
    time.sleep(0.2)
    st, _, _ = cl.call("DELETE", "/v1/jobs/" + j["id"])
    check(st == 202, "DELETE of the hanging job: %d" % st)
    f = wait_final(cl, j["id"])
    check(f["state"] == "failed" and "did not stop" in f["error"] and "SIGKILL" in f["error"], "hanging worker: %s" % f)
    st, j2, _ = cl.call("POST", "/v1/videos", body(inputs, seed=1, steps=3))
    f = wait_final(cl, j2["id"])
    st, data, _ = cl.call("GET", "/v1/jobs/%s/result" % j2["id"], raw=True)
    check(f["state"] == "succeeded" and data == ref, "the job after the hang: %s" % f)
    return 2


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--inputs", required=True)
    p.add_argument("--refs", nargs="+", required=True, help="generate --out for seeds 1, 2, ...")
    p.add_argument("--count", type=int, default=200)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--max-queued", type=int, required=True)
    p.add_argument("--max-body", type=int, required=True)
    p.add_argument("--hang-seed", type=int, required=True)
    p.add_argument("--slow-seed", type=int, required=True)
    p.add_argument("--preview-ref", nargs=2, metavar=("OUT", "PNG"),
                   help="generate --out and its --preview's step_003.png for --slow-seed, 3 steps")
    p.add_argument("--retention", action="store_true", help="only the --keep-results 1 check")
    a = p.parse_args()
    token = open(a.token_file).read().strip()
    cl = Client(a.port, token)
    inputs = base64.b64encode(open(a.inputs, "rb").read()).decode()
    refs = [open(r, "rb").read() for r in a.refs]
    if a.retention:
        return retention(cl, inputs, refs)
    check(a.preview_ref, "--preview-ref is needed but for --retention")
    security(cl, inputs, a.max_body)
    n = load(cl, inputs, refs, a.count, a.threads)
    n += queue_full(cl, inputs, a.max_queued)
    n += expire(cl, inputs, a.slow_seed)
    n += events(cl, inputs, refs[0])
    n += previews(cl, inputs, a.slow_seed, open(a.preview_ref[0], "rb").read(), open(a.preview_ref[1], "rb").read())
    n += refused_options(cl, inputs)
    n += binary_form(cl, inputs, refs[0])
    n += kill_worker(cl, inputs, refs[0])
    n += hang(cl, inputs, refs[0], a.hang_seed)
    st, s, _ = cl.call("GET", "/status")
    total = sum(s["jobs"][k] for k in FINAL)
    check(total == n and s["jobs"]["queued"] == 0 and s["jobs"]["running"] == 0,
          "every accepted job accounted for: %d accepted, /status %s" % (n, s["jobs"]))
    st, m, _ = cl.call("GET", "/metrics", raw=True)
    m = m.decode()
    for reason in ("queue_full", "deadline", "auth", "too_large", "bad_request"):
        line = [x for x in m.splitlines() if x.startswith('ditrun_serve_rejections_total{reason="%s"}' % reason)]
        check(line and int(line[0].split()[-1]) > 0, "metrics: no %s rejection counted" % reason)
    check("ditrun_serve_step_seconds_bucket" in m and "ditrun_serve_queue_depth 0" in m, "metrics: histograms and gauge")
    st, page, _ = cl.call("GET", "/", token=False, raw=True)
    check(st == 200 and b'id="progress"' in page and b"/status" in page, "status page")
    print("serve_client: %d jobs accepted, all in a final state: %s" % (n, s["jobs"]))


if __name__ == "__main__":
    main()
