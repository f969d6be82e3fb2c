#!/usr/bin/env python3
"""Text-prompt jobs of `ditrun serve` (stdlib only), against a server started by
tests/integration/serve_prompt.sh over three bundles of the tiny Wan pipeline: FULL (text encoder
and VAE stages), TE (the text encoder stage alone) and BARE (no stages).

Checks: a prompt job's result for each `output` (latents, frames, png, mp4) is byte-identical to
`ditrun generate --prompt ... --out` with the same seed and steps and comes with its Content-Type;
the binary form (options in the query, an empty body) gives the same PNG; the refusals name the
field: a prompt on BARE (with the compile that adds the stage), a decoded output on TE, a decoded
output or a negative prompt without a prompt, an unknown output, an over-long prompt, a prompt
beside prompt embeddings."""
import argparse
import http.client
import json
import struct
import sys
import urllib.parse

from serve_client import check, wait_final


class Client:
    def __init__(self, port):
        self.port = port

    def call(self, method, path, body=None, binary=False):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request(method, path, body=body, headers={"Content-Type": "application/octet-stream" if binary else "application/json"})
        r = c.getresponse()
        data, ctype = r.read(), r.getheader("Content-Type")
        c.close()
        try:
            return r.status, json.loads(data), ctype
        except ValueError:
            return r.status, data, ctype


TYPES = {"latents": "application/octet-stream", "frames": "application/octet-stream", "png": "image/png", "mp4": "video/mp4"}


def result(cl, created, output, ref):
    st, j, _ = created
    check(st == 201, "%s job: %d %s" % (output, st, j))
    j = wait_final(cl, j["id"], limit=120)
    check(j["state"] == "succeeded", "%s job: %s" % (output, j))
    check(j.get("output", "latents") == output, "the job's output: %s" % j)
    st, data, ctype = cl.call("GET", "/v1/jobs/%s/result" % j["id"])
    check(st == 200 and ctype == TYPES[output], "%s result: %d %s" % (output, st, ctype))
    want = open(ref, "rb").read()
    check(data == want, "%s result: %d bytes differ from generate --out's %d" % (output, len(data), len(want)))


def refused(cl, path, req, field, *words, code=400, binary=None):
    st, j, _ = cl.call("POST", path, binary if binary is not None else json.dumps(req), binary=binary is not None)
    msg = j["error"]["message"] if isinstance(j, dict) and "error" in j else str(j)
    check(st == code and field in msg and all(w in msg for w in words), "refusal (%s): %d %s" % (field, st, msg))


def embeddings_inputs(name):
    """A safetensors image of one F32 tensor `name` of shape [1]."""
    header = json.dumps({name: {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    return struct.pack("<Q", len(header)) + header + struct.pack("<f", 0.0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bundles", nargs=3, required=True, metavar=("FULL", "TE", "BARE"))
    p.add_argument("--prompt", required=True)
    p.add_argument("--negative-prompt", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--refs", nargs=4, required=True, metavar=("LATENTS", "FRAMES", "PNG", "MP4"))
    a = p.parse_args()
    cl = Client(a.port)
    full, te, bare = a.bundles
    job = {"bundle": full, "prompt": a.prompt, "negative_prompt": a.negative_prompt, "seed": a.seed, "steps": a.steps}
    refs = dict(zip(("latents", "frames", "png", "mp4"), a.refs))
    for output, ref in refs.items():
        req = dict(job, output=output) if output != "latents" else job
        result(cl, cl.call("POST", "/v1/videos", json.dumps(req)), output, ref)
    # The binary form: the options in the query, no inputs.
    q = urllib.parse.urlencode(dict(job, output="png"))
    result(cl, cl.call("POST", "/v1/videos?" + q, b"", binary=True), "png", refs["png"])
    # A bundle with the text encoder alone: the latents, as the full pipeline's.
    result(cl, cl.call("POST", "/v1/videos", json.dumps(dict(job, bundle=te))), "latents", refs["latents"])

    refused(cl, "/v1/videos", dict(job, bundle=bare), "field 'prompt': bundle %s has no text_encoder stage" % bare,
            "--stages transformer,text_encoder,vae")
    refused(cl, "/v1/videos", dict(job, bundle=te, output="mp4"), "field 'output': bundle %s has no vae_decoder stage" % te,
            "--stages transformer,text_encoder,vae")
    emb = embeddings_inputs("prompt_embeds")
    q = urllib.parse.urlencode({"bundle": full, "output": "mp4", "seed": 1})
    refused(cl, "/v1/videos?" + q, None, "field 'output' \"mp4\": decoded frames come from the VAE stage", binary=emb)
    q = urllib.parse.urlencode({"bundle": full, "negative_prompt": "blurry"})
    refused(cl, "/v1/videos?" + q, None, "field 'negative_prompt' goes with 'prompt'", binary=emb)
    refused(cl, "/v1/videos", dict(job, output="gif"), "output", "expected one of latents, frames, png, mp4")
    refused(cl, "/v1/videos", dict(job, prompt="x" * 4096), "prompt", "expected at most 4095 bytes")
    q = urllib.parse.urlencode(dict(job))
    refused(cl, "/v1/videos?" + q, None, "field 'prompt' and the inputs' tensor 'prompt_embeds'", binary=emb)
    refused(cl, "/v1/videos", {"bundle": full, "seed": 1}, "inputs", "missing")
    print("serve_prompt_client: prompt jobs (4 outputs, binary form) byte-identical to generate; 8 refusals checked")


if __name__ == "__main__":
    main()
