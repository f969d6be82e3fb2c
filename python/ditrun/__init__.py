"""ditrun: compiled diffusion-transformer bundles from Python.

    bundle = ditrun.Bundle("bundles/<identity>")            # or Bundle(identity, store=...)
    out = bundle.forward(hidden_states=x, timestep=t, encoder_hidden_states=e)["sample"]

numpy arrays run on the CPU backend; torch tensors on the CPU or on the bundle's GPU (CUDA
tensors stay on the device, on torch's current stream). ditrun.diffusers.CompiledTransformer
stands in for a diffusers pipeline's transformer; ditrun.compile runs ditc.

libditrun is loaded with ctypes from the package's lib/ directory, else from $DITRUN_LIBRARY.
"""
import os
import shutil
import subprocess

from ._bundle import Bundle, Error, TensorSpec

__all__ = ["Bundle", "Error", "TensorSpec", "compile", "api_version", "tool_path"]
__version__ = "0.1.0"


def api_version():
    """The loaded libditrun's API version (major * 1000 + minor)."""
    from . import _capi
    return _capi.lib().ditrun_api_version()


def tool_path(name):
    """A command-line tool (ditc, ditrun): the package's bin/, beside the library that
    $DITRUN_LIBRARY names (a build tree's bin/), else PATH."""
    here = os.path.dirname(os.path.abspath(__file__))
    places = [os.path.join(here, "bin")]
    lib = os.environ.get("DITRUN_LIBRARY")
    if lib:
        places += [os.path.dirname(lib), os.path.join(os.path.dirname(os.path.dirname(lib)), "bin")]
    for d in places:
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    p = shutil.which(name)
    if not p:
        raise FileNotFoundError("%s not found in %s nor on PATH" % (name, ", ".join(places)))
    return p


def _option(key, value):
    flag = "--" + key.replace("_", "-")
    if value is True:
        return [flag]
    if value is False or value is None:
        return []
    return [flag, str(value)]


def compile(model_dir, out=None, *, open=True, quiet=False, **options):
    """Compiles a diffusers transformer or pipeline directory for one shape with ditc and
    returns the bundle (a ditrun.Bundle, or its path with open=False). options are ditc's
    compile options by name: height=480, width=832, frames=81, batch=2, text_len=512,
    dtype="bf16", target="sm_90", offload="chunked", cfg_parallel=True, store=..., ...
    except device, graph and threads, which open the bundle (ditrun.Bundle's: graph=None, the
    default, a CUDA graph where it applies; True or False to ask for it or not).
    ditc's progress goes to this process's stderr as it runs."""
    cmd = [tool_path("ditc"), "compile", os.fspath(model_dir)]
    if out is not None:
        cmd += ["-o", os.fspath(out)]
    if quiet:
        cmd.append("-q")
    bundle_options = {}
    for key in ("device", "graph", "threads"):  # for opening, not for compiling
        if key in options:
            bundle_options[key] = options.pop(key)
    for key, value in options.items():
        cmd += _option(key, value)
    env = dict(os.environ)
    libdir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib")
    if os.path.isdir(libdir):  # the wheel's bundled libraries, for their own dependencies
        env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=None, text=True, env=env)
    if proc.returncode:
        raise Error(proc.returncode, "COMPILE_FAILED", "ditc exited with status %d: %s (its messages are above)"
                    % (proc.returncode, " ".join(cmd)))
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    parts = last.split(" ", 2)
    if len(parts) != 3 or parts[0] != "bundle":
        raise Error(10, "INTERNAL", "ditc's last line is %r, expected 'bundle <identity> <path>'" % last)
    path = parts[2]
    return Bundle(path, **bundle_options) if open else path
