"""The installed ditrun package on the CPU with numpy: the tiny Wan golden forward matches
diffusers (max relative error <= 1e-4, as the command line's golden test), by path and by store
identity; graph=False gives the default's bytes and graph=True is refused on the CPU; the
signature is the bundle's; bad shapes, dtypes and names and a missing input raise ditrun.Error
with the library's code and message.

    python3 -P python/test_ditrun.py DATA_DIR WORK_DIR    (-P: the installed package, not the source)
"""
import ctypes
import json
import os
import struct
import sys

import numpy as np

import ditrun


def safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for name, h in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        a, b = h["data_offsets"]
        dt = {"F32": np.float32, "I64": np.int64}[h["dtype"]]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=dt).reshape(h["shape"])
    return out


def expect_error(code_name, fragment, **tensors):
    try:
        bundle.forward(**tensors)
    except ditrun.Error as e:
        assert e.code_name == code_name and fragment in e.message, "expected %s with %r, got %s" % (code_name, fragment, e)
        assert str(e) == "%s: %s" % (e.code_name, e.message)
        print("refused as expected:", e)
        return
    raise AssertionError("no error for %s (expected %s: %s)" % (sorted(tensors), code_name, fragment))


def max_rel(got, want):
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


data, work = sys.argv[1], sys.argv[2]
pkg = os.path.dirname(os.path.abspath(ditrun.__file__))
assert os.path.exists(os.path.join(pkg, "lib", "libditrun.so.1")), "not the installed wheel: " + pkg
assert ditrun.api_version() // 1000 == 1, ditrun.api_version()
meta = json.load(open(os.path.join(data, "meta.json")))
shape = dict(frames=meta["frames"], height=meta["height"], width=meta["width"], batch=meta["batch"],
             text_len=meta["text_len"])
store = os.path.join(work, "store")
# Through the wheel's own ditc, entered into a store as well.
bundle = ditrun.compile(os.path.join(data, "model"), quiet=True, store=store, **shape)
inputs = safetensors(os.path.join(data, "forward_inputs.safetensors"))
want = safetensors(os.path.join(data, "forward_output.safetensors"))["sample"]

sig = bundle.signature
assert list(sig["inputs"]) == ["hidden_states", "timestep", "encoder_hidden_states"], list(sig["inputs"])
assert sig["inputs"]["hidden_states"].shape == inputs["hidden_states"].shape
assert sig["inputs"]["hidden_states"].dtype == "f32"
assert list(sig["outputs"]) == ["sample"] and sig["outputs"]["sample"].shape == want.shape
assert bundle.family == "wan" and bundle.backend == "cpu" and bundle.config["num_layers"] >= 1, bundle.description

out = bundle.forward(**inputs)
assert list(out) == ["sample"] and isinstance(out["sample"], np.ndarray) and out["sample"].dtype == np.float32
err = max_rel(out["sample"], want)
assert err <= 1e-4, "forward differs from diffusers: max relative error %g" % err
print("forward matches diffusers: max relative error %.3g" % err)
# A timestep given as a float instead of diffusers' integer: converted alike.
again = bundle.forward(hidden_states=inputs["hidden_states"], timestep=inputs["timestep"].astype(np.float32),
                       encoder_hidden_states=inputs["encoder_hidden_states"])
assert np.array_equal(again["sample"], out["sample"]), "a float timestep changed the output"

# The same bundle by identity from the store.
by_id = ditrun.Bundle(bundle.identity, store=store)
assert by_id.identity == bundle.identity
assert np.array_equal(by_id.forward(**inputs)["sample"], out["sample"])
by_id.close()

# graph: None (the default: a graph where one applies, none on the CPU), False (never), True
# (refused on the CPU backend, naming why).
off = ditrun.Bundle(bundle.identity, store=store, graph=False)
assert np.array_equal(off.forward(**inputs)["sample"], out["sample"]), "graph=False changed the output"
off.close()
try:
    ditrun.Bundle(bundle.identity, store=store, graph=True)
    raise AssertionError("graph=True opened on the cpu backend")
except ditrun.Error as e:
    assert e.code_name == "UNAVAILABLE" and "--cuda-graph: the cpu backend has no graphs" in e.message, e
    print("refused as expected:", e)
try:
    ditrun.Bundle(bundle.identity, store=store, graph="on")
    raise AssertionError("graph='on' accepted")
except ValueError as e:
    assert "graph='on'" in str(e), e

hs = inputs["hidden_states"]
expect_error("INVALID_ARGUMENT", "input 'hidden_states': shape [1,4,3,4,5], the bundle expects [1,4,3,4,6]",
             **dict(inputs, hidden_states=np.ascontiguousarray(hs[..., :5])))
expect_error("INVALID_ARGUMENT", "input 'hidden_states': dtype 'float64'", **dict(inputs, hidden_states=hs.astype(np.float64)))
expect_error("INVALID_ARGUMENT", "input 'timestep': shape [1,1], the bundle expects [1]",
             **dict(inputs, timestep=inputs["timestep"][None]))
expect_error("FAILED_PRECONDITION", "input 'timestep': not bound",
             hidden_states=hs, encoder_hidden_states=inputs["encoder_hidden_states"])
expect_error("NOT_FOUND", "input 'latents': the bundle has no such input", **dict(inputs, latents=hs))
# Device memory on the CPU backend, through the C API itself: refused, naming the backend.
from ditrun import _capi, _bundle  # noqa: E402
t = _capi.Tensor(data=hs.ctypes.data, dtype=0, memory=_capi.DEVICE, rank=hs.ndim)
for i, d in enumerate(hs.shape):
    t.dims[i] = d
try:
    _bundle._check(_capi.lib().ditrun_bind_input(bundle._handle, b"hidden_states", ctypes.byref(t)))
    raise AssertionError("device memory bound on the cpu backend")
except ditrun.Error as e:
    assert "input 'hidden_states': device memory given, the bundle runs on the cpu backend" in e.message, e
    print("refused as expected:", e)
try:
    ditrun.Bundle(os.path.join(work, "no_such_bundle"))
    raise AssertionError("a missing bundle opened")
except ditrun.Error as e:
    assert "no_such_bundle" in e.message, e
    print("refused as expected:", e)
# The errors left the bundle usable.
assert np.array_equal(bundle.forward(**inputs)["sample"], out["sample"])
bundle.close()
try:
    bundle.forward(**inputs)
    raise AssertionError("a closed bundle ran")
except ditrun.Error as e:
    assert e.code_name == "FAILED_PRECONDITION", e
print("ditrun package: golden forward, signature and errors as expected")
