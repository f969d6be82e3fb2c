#!/usr/bin/env python3
"""What `ditrun serve` adds to a job over the command line's loop (stdlib only).

Runs `ditrun generate BUNDLE ... --out` --cli-runs times (its loop time is the line "generate N
steps in X s"), then sends -n requests one after another with the same inputs, seed and steps to
a running server (idle, started without the test hooks), follows each to its end on the event
stream, and reads the job's "timing" (runtime/serve/serve.c job_json: the server's clock from
the request's receipt, and the worker's own loop time). Every served result must be
byte-identical to generate's --out (exit 1 otherwise). Prints, medians over the runs:

  overhead = (served request time - CLI loop time) / CLI loop time    target <= 1% (50 steps, GPU)
  request to first step = receipt -> the loop's start, idle server    target <= 50 ms

--enforce makes a miss of either target exit 1 (for the GPU run; on the tiny CPU model the loop
takes milliseconds, so the ratio there says nothing and is only printed)."""
import argparse
import base64
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def call(a, method, path, body=None, raw=False, binary=False):
    c = http.client.HTTPConnection(a.host, a.port, timeout=600)
    h = {"Content-Type": "application/octet-stream" if binary else "application/json"}
    if a.token:
        h["Authorization"] = "Bearer " + a.token
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data if raw else json.loads(data)


def negative_in(path):
    """Whether the safetensors file holds negative embeddings: the server's worker then passes
    --negative-embeds (runtime/serve/worker.c job_argv), and so does the CLI run here."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return any(k.startswith("negative_") for k in json.loads(f.read(n)))


def cli_run(a, out):
    cmd = [a.ditrun, "generate", a.bundle, "--prompt-embeds", a.inputs, "--seed", str(a.seed), "--steps", str(a.steps), "--out", out]
    if negative_in(a.inputs):
        cmd[3:3] = ["--negative-embeds", a.inputs]
    p = subprocess.run(cmd + a.generate_args, capture_output=True, text=True)
    if p.returncode:
        sys.exit("serve_overhead: %s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr[-2000:]))
    m = re.search(r"generate (\d+) steps in ([0-9.]+)s", p.stderr)
    if not m or int(m.group(1)) != a.steps:
        sys.exit("serve_overhead: no 'generate %d steps in Xs' line from ditrun generate" % a.steps)
    return float(m.group(2))


def served(a, route, body, ref):
    st, s = call(a, "GET", "/status")
    if st != 200 or s["running"] is not None or s["jobs"]["queued"]:
        sys.exit("serve_overhead: the server is not idle (/status %d: %s)" % (st, s.get("jobs") if st == 200 else s))
    t0 = time.monotonic()
    st, j = call(a, "POST", route, body, binary=not a.json_body)
    if st != 201:
        sys.exit("serve_overhead: POST %s: %d %s" % (route, st, j))
    st, ev = call(a, "GET", "/v1/jobs/%s/events" % j["id"], raw=True)  # returns at the job's end
    wall = time.monotonic() - t0
    st, j = call(a, "GET", "/v1/jobs/" + j["id"])
    if j["state"] != "succeeded":
        sys.exit("serve_overhead: %s ended %s: %s" % (j["id"], j["state"], j.get("error")))
    st, data = call(a, "GET", "/v1/jobs/%s/result" % j["id"], raw=True)
    if st != 200 or data != ref:
        sys.exit("serve_overhead: %s: the served result differs from ditrun generate --out" % j["id"])
    t = j["timing"]
    if min(t.values()) < 0 or not t["t_queued_s"] <= t["t_loop_start_s"] <= t["t_first_step_s"] <= t["t_end_s"]:
        sys.exit("serve_overhead: %s: inconsistent timing %s" % (j["id"], t))
    t["wall_s"] = wall
    return t


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--token-file")
    p.add_argument("--ditrun", required=True, help="the ditrun binary")
    p.add_argument("--bundle", required=True, help="the served bundle, as generate takes it")
    p.add_argument("--identity", help="sent as the request's 'bundle' (needed when several are served)")
    p.add_argument("--inputs", required=True, help="the request's tensors (safetensors: prompt_embeds, negative_prompt_embeds)")
    p.add_argument("--route", default="/v1/videos")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("-n", type=int, default=5, help="served requests")
    p.add_argument("--cli-runs", type=int, default=3)
    p.add_argument("--json-body", action="store_true", help="send the JSON form (base64 inputs) instead of the binary form")
    p.add_argument("--enforce", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("generate_args", nargs="*", help="after --: more options for generate (load options as the server was given)")
    a = p.parse_args()
    a.token = open(a.token_file).read().strip() if a.token_file else None
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "ref.safetensors")
        cli = [cli_run(a, out) for _ in range(a.cli_runs)]
        ref = open(out, "rb").read()
    if a.json_body:
        req = {"inputs": base64.b64encode(open(a.inputs, "rb").read()).decode(), "seed": a.seed, "steps": a.steps}
        if a.identity:
            req["bundle"] = a.identity
        body, route = json.dumps(req), a.route
    else:  # the binary form: the safetensors inputs as the body, the options in the query
        q = "seed=%d&steps=%d" % (a.seed, a.steps) + ("&bundle=" + a.identity if a.identity else "")
        body, route = open(a.inputs, "rb").read(), a.route + "?" + q
    runs = [served(a, route, body, ref) for _ in range(a.n)]
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    cli_loop = statistics.median(cli)
    overhead = (med["t_end_s"] - cli_loop) / cli_loop
    first_ms = med["t_loop_start_s"] * 1000
    print("serve_overhead: %s requests" % ("JSON (base64 inputs)" if a.json_body else "binary (safetensors body, options in the query)"))
    print("serve_overhead: %d steps; CLI loop %.6f s (median of %d); served (median of %d): request %.6f s (client %.6f s), "
          "worker loop %.6f s, queued %.3f ms, first step reported at %.3f ms" %
          (a.steps, cli_loop, len(cli), a.n, med["t_end_s"], med["wall_s"], med["loop_s"], med["t_queued_s"] * 1000, med["t_first_step_s"] * 1000))
    print("serve_overhead: overhead over the CLI loop: %.4f%% (target <= 1%%); server's own over its worker's loop: %.4f%%" %
          (overhead * 100, (med["t_end_s"] - med["loop_s"]) / med["loop_s"] * 100))
    print("serve_overhead: request to first step: %.3f ms (target <= 50 ms); results byte-identical to generate --out: %d of %d" %
          (first_ms, a.n, a.n))
    if a.enforce and (overhead > 0.01 or first_ms > 50):
        sys.exit("serve_overhead: a target was missed")


if __name__ == "__main__":
    main()
