"""ctypes declarations of libditrun's embedding API (runtime/ditrun_api.h).

ctypes rather than a compiled extension: the one wheel then works with any Python 3 and any
torch, and the library's ABI (plain C, versioned by its SONAME) is the only contract. The
structures below mirror the header field for field; ditrun_api_version() is checked at load.
"""
import ctypes
import os

API_MAJOR = 1
MAX_RANK = 8
HOST, DEVICE = 0, 1
DTYPES = ("f32", "bf16", "f16", "i64", "i32", "u8")  # ditrun_dtype values, in order


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("dims", ctypes.c_int64 * MAX_RANK)]


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("memory", ctypes.c_int),
                ("rank", ctypes.c_int), ("dims", ctypes.c_int64 * MAX_RANK)]


class OpenOptions(ctypes.Structure):
    # ditrun_open_options; graph: 0 auto (a CUDA graph where it applies), 1 on, -1 off.
    _fields_ = [("size", ctypes.c_size_t), ("backend", ctypes.c_char_p), ("device", ctypes.c_int),
                ("threads", ctypes.c_int), ("graph", ctypes.c_int), ("store", ctypes.c_char_p),
                ("cache", ctypes.c_char_p), ("expert", ctypes.c_char_p)]


_SONAME = "libditrun.so.%d" % API_MAJOR


def library_path():
    """libditrun beside the package (the wheel's lib/), then $DITRUN_LIBRARY."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", _SONAME)
    if os.path.exists(here):
        return here
    env = os.environ.get("DITRUN_LIBRARY")
    if env:
        return env
    raise OSError("libditrun not found: neither %s nor $DITRUN_LIBRARY (the path of libditrun.so from a ditc build, "
                  "e.g. build/lib/libditrun.so)" % here)


def _declare(lib):
    S = ctypes.c_void_p  # ditrun_status *: NULL is success
    P = ctypes.c_void_p  # ditrun_bundle *
    sigs = {
        "ditrun_api_version": (ctypes.c_int, []),
        "ditrun_status_code": (ctypes.c_int, [S]),
        "ditrun_status_message": (ctypes.c_char_p, [S]),
        "ditrun_code_name": (ctypes.c_char_p, [ctypes.c_int]),
        "ditrun_status_free": (None, [S]),
        "ditrun_free": (None, [ctypes.c_void_p]),
        "ditrun_dtype_parse": (S, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
        "ditrun_open_options_init": (None, [ctypes.POINTER(OpenOptions)]),
        "ditrun_bundle_open": (S, [ctypes.c_char_p, ctypes.POINTER(OpenOptions), ctypes.POINTER(P)]),
        "ditrun_bundle_close": (None, [P]),
        "ditrun_bundle_num_inputs": (ctypes.c_size_t, [P]),
        "ditrun_bundle_num_outputs": (ctypes.c_size_t, [P]),
        "ditrun_bundle_input": (S, [P, ctypes.c_size_t, ctypes.POINTER(TensorInfo)]),
        "ditrun_bundle_output": (S, [P, ctypes.c_size_t, ctypes.POINTER(TensorInfo)]),
        "ditrun_bundle_describe_json": (S, [P, ctypes.POINTER(ctypes.c_void_p)]),
        "ditrun_bundle_select_expert": (S, [P, ctypes.c_char_p]),
        "ditrun_bind_input": (S, [P, ctypes.c_char_p, ctypes.POINTER(Tensor)]),
        "ditrun_bind_output": (S, [P, ctypes.c_char_p, ctypes.POINTER(Tensor)]),
        "ditrun_forward": (S, [P, ctypes.c_void_p]),
        "ditrun_output_view": (S, [P, ctypes.c_char_p, ctypes.POINTER(Tensor)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
    return lib


_lib = None


def _preload(path):
    """The wheel's bundled libraries (lib/preload.txt, leaves first), loaded before libditrun so
    that each one's own dependencies resolve to the bundled copies, not to whatever the system
    has (or lacks)."""
    d = os.path.dirname(path)
    listing = os.path.join(d, "preload.txt")
    if not os.path.exists(listing):
        return
    for so in open(listing).read().split():
        ctypes.CDLL(os.path.join(d, so), mode=ctypes.RTLD_GLOBAL)


def lib():
    global _lib
    if _lib is None:
        path = library_path()
        _preload(path)
        loaded = _declare(ctypes.CDLL(path))
        version = loaded.ditrun_api_version()
        if version // 1000 != API_MAJOR:
            raise OSError("%s: API version %d, this package speaks major %d" % (path, version, API_MAJOR))
        _lib = loaded
    return _lib
