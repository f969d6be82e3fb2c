"""ditrun.Bundle: a compiled bundle opened through libditrun, run on numpy arrays or torch tensors.

torch is imported only when a torch tensor is given, so the CPU path needs numpy alone. Host
arrays are copied into the bundle's input buffers (converted to its dtypes); CUDA tensors are
copied device to device on torch's current stream, and outputs are written into new tensors on
that stream: nothing passes through the host. The copies cannot be avoided: a forward's kernels
(and a captured CUDA graph) read fixed buffer addresses.
"""
import collections
import ctypes
import json
import os
import sys

from . import _capi

TensorSpec = collections.namedtuple("TensorSpec", "name dtype shape")

# numpy and torch spellings of our dtypes, for outputs allocated here; bf16 has no numpy dtype
# (numpy outputs of a bf16 bundle come back as float32, converted by the library).
_NUMPY_OF = {"f32": "float32", "f16": "float16", "bf16": "float32", "i64": "int64", "i32": "int32", "u8": "uint8"}
_TORCH_OF = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "i64": "int64", "i32": "int32", "u8": "uint8"}


class Error(Exception):
    """A failure reported by libditrun: .code (the runtime's numeric code), .code_name
    ("INVALID_ARGUMENT", ...) and .message (the library's message, naming the input or file and the
    values expected and found)."""

    def __init__(self, code, code_name, message):
        super().__init__("%s: %s" % (code_name, message))
        self.code = code
        self.code_name = code_name
        self.message = message


def _check(status, context=None):
    if not status:
        return
    lib = _capi.lib()
    code = lib.ditrun_status_code(status)
    message = lib.ditrun_status_message(status).decode("utf-8", "replace")
    lib.ditrun_status_free(status)
    if context:
        message = "%s: %s" % (context, message)
    raise Error(code, lib.ditrun_code_name(code).decode(), message)


def _parse_dtype(name, what):
    out = ctypes.c_int()
    _check(_capi.lib().ditrun_dtype_parse(name.encode(), ctypes.byref(out)), what)
    return out.value


def _is_torch(x):
    # Without importing torch: a tensor's class lives in the torch module.
    return type(x).__module__.split(".")[0] == "torch" and "torch" in sys.modules


def _device_arg(device, backend):
    """(backend, ordinal) from device=None | "cpu" | "cuda" | "cuda:N" | N | torch.device."""
    if device is None:
        return backend, 0
    if isinstance(device, int):
        return backend or "cuda", device
    text = str(device)
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda"):
        raise ValueError("device %r: expected 'cpu', 'cuda', 'cuda:N' or a GPU ordinal" % (device,))
    return backend or kind, int(index) if index else 0


class Bundle:
    """A compiled bundle (a directory, a .ditb archive, or an identity in `store`), opened with
    full verification. device: None (the bundle's target), "cpu", "cuda", "cuda:N" or an ordinal;
    expert: for a two-expert bundle, the one to load ("transformer" or "transformer_2"); graph:
    None (the default) captures the forward once as a CUDA graph and replays it where a graph
    applies (one rank, a GPU backend, no offload streaming), True asks for it (ditrun.Error where
    it cannot be used: the CPU backend, several ranks, ...), False runs every forward step by
    step."""

    def __init__(self, path_or_id, store=None, device=None, *, backend=None, threads=0, graph=None, cache=None,
                 expert=None):
        self._handle = None
        lib = _capi.lib()
        backend, ordinal = _device_arg(device, backend)
        o = _capi.OpenOptions()
        lib.ditrun_open_options_init(ctypes.byref(o))
        enc = lambda s: os.fsencode(s) if s is not None else None  # noqa: E731
        if graph not in (None, True, False):
            raise ValueError("graph=%r: expected None (a graph where it applies), True or False" % (graph,))
        o.backend, o.device, o.threads = enc(backend), ordinal, int(threads)
        o.graph = 0 if graph is None else 1 if graph else -1  # the library's auto, on, off
        o.store, o.cache, o.expert = enc(store), enc(cache), enc(expert)
        handle = ctypes.c_void_p()
        _check(lib.ditrun_bundle_open(os.fsencode(str(path_or_id)), ctypes.byref(o), ctypes.byref(handle)))
        self._handle = handle
        text = ctypes.c_void_p()
        _check(lib.ditrun_bundle_describe_json(handle, ctypes.byref(text)))
        try:
            self.description = json.loads(ctypes.string_at(text).decode())
        finally:
            lib.ditrun_free(text)
        self.inputs = [TensorSpec(t["name"], t["dtype"], tuple(t["shape"])) for t in self.description["inputs"]]
        self.outputs = [TensorSpec(t["name"], t["dtype"], tuple(t["shape"])) for t in self.description["outputs"]]
        self.backend = self.description["backend"]
        self.device_index = ordinal
        self._kept = []

    # ---- signature ----
    @property
    def signature(self):
        """{"inputs": {name: TensorSpec}, "outputs": {name: TensorSpec}} in the bundle's order."""
        return {"inputs": collections.OrderedDict((t.name, t) for t in self.inputs),
                "outputs": collections.OrderedDict((t.name, t) for t in self.outputs)}

    family = property(lambda self: self.description["family"])
    config = property(lambda self: self.description["config"])
    generate = property(lambda self: self.description["generate"])
    identity = property(lambda self: self.description["identity"])
    shape = property(lambda self: self.description["shape"])

    def select_expert(self, name):
        _check(_capi.lib().ditrun_bundle_select_expert(self._live(), name.encode()))

    # ---- running ----
    def _live(self):
        if not self._handle:
            raise Error(6, "FAILED_PRECONDITION", "the bundle is closed")
        return self._handle

    def _bind(self, name, x):
        """Binds input `name` to a numpy array or torch tensor; returns what must stay alive until
        the forward (a device input is copied then)."""
        spec = self.signature["inputs"].get(name)
        t = _capi.Tensor()
        if _is_torch(x):
            x = self._torch_input(spec, x)
            t.data = x.data_ptr()
            t.memory = _capi.DEVICE if x.is_cuda else _capi.HOST
            dtype = str(x.dtype).replace("torch.", "")
        else:
            import numpy as np
            x = np.ascontiguousarray(x)
            t.data = x.ctypes.data if x.size else 1  # a valid address for an empty array
            t.memory = _capi.HOST
            dtype = x.dtype.name
        t.dtype = _parse_dtype(dtype, "input '%s'" % name)
        if len(x.shape) > _capi.MAX_RANK:
            raise Error(1, "INVALID_ARGUMENT", "input '%s': rank %d, at most %d" % (name, len(x.shape), _capi.MAX_RANK))
        t.rank = len(x.shape)
        for i, d in enumerate(x.shape):
            t.dims[i] = d
        _check(_capi.lib().ditrun_bind_input(self._handle, name.encode(), ctypes.byref(t)))
        return x

    def _torch_input(self, spec, x):
        """A CUDA tensor in the bundle's dtype and layout (converted on its device, on torch's
        stream); CPU tensors as they are (the library converts on the host)."""
        import torch
        if not x.is_cuda:
            return x.detach().contiguous()
        if x.device.index != self.device_index:
            raise Error(1, "INVALID_ARGUMENT", "input '%s': on %s, the bundle runs on cuda:%d" % (
                spec.name if spec else "?", x.device, self.device_index))
        if spec is not None:
            want = getattr(torch, _TORCH_OF[spec.dtype])
            # Converted on the device where that is exact in meaning (floats, integers to floats,
            # integers and bools to integers); a float for an integer input is the library's to
            # refuse, with its message.
            if x.dtype != want and (want.is_floating_point or not x.dtype.is_floating_point):
                x = x.to(want)
            # A per-token timestep [B, T] given per batch item [B]: repeated over the tokens, as the
            # library does for host memory.
            if len(spec.shape) == 2 and x.dim() == 1 and spec.name == "timestep" and x.shape[0] == spec.shape[0]:
                x = x[:, None].expand(spec.shape)
        return x.detach().contiguous()

    def forward(self, **tensors):
        """One forward: every input of the bundle by name (numpy arrays, or torch tensors on the CPU
        or on the bundle's GPU). Returns {output name: array or tensor}: numpy when the inputs were
        numpy, torch tensors on the inputs' device otherwise."""
        lib = _capi.lib()
        handle = self._live()
        for spec in self.inputs:  # only what this call gives counts; the library names what is missing
            _check(lib.ditrun_bind_input(handle, spec.name.encode(), None))
        kept = [self._bind(name, x) for name, x in tensors.items()]
        use_torch = any(_is_torch(x) for x in tensors.values())
        cuda = use_torch and any(_is_torch(x) and x.is_cuda for x in tensors.values())
        outs = {}
        for spec in self.outputs:
            o = _capi.Tensor()
            if use_torch:
                import torch
                device = torch.device("cuda", self.device_index) if cuda else torch.device("cpu")
                dt = spec.dtype if cuda or spec.dtype in ("f32", "f16", "bf16") else "f32"
                y = torch.empty(spec.shape, dtype=getattr(torch, _TORCH_OF[dt]), device=device)
                o.data, o.memory = y.data_ptr(), _capi.DEVICE if cuda else _capi.HOST
            else:
                import numpy as np
                dt = spec.dtype if spec.dtype != "bf16" else "f32"
                y = np.empty(spec.shape, dtype=_NUMPY_OF[dt])
                o.data, o.memory = y.ctypes.data, _capi.HOST
            o.dtype, o.rank = _capi.DTYPES.index(dt), len(spec.shape)
            for i, d in enumerate(spec.shape):
                o.dims[i] = d
            _check(lib.ditrun_bind_output(handle, spec.name.encode(), ctypes.byref(o)))
            outs[spec.name] = y
        stream = None
        if cuda:
            import torch
            stream = torch.cuda.current_stream(self.device_index).cuda_stream
        try:
            _check(lib.ditrun_forward(handle, ctypes.c_void_p(stream) if stream else None))
        finally:
            for spec in self.outputs:  # the arrays above are the caller's now
                lib.ditrun_bind_output(handle, spec.name.encode(), None)
            del kept
        return outs

    __call__ = forward

    def close(self):
        if self._handle:
            _capi.lib().ditrun_bundle_close(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "ditrun.Bundle(%s %s, %s, identity %s)" % (self.family, self.description["variant"], self.backend,
                                                          self.identity)
