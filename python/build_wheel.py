#!/usr/bin/env python3
"""Builds the ditrun wheel from a CMake build: the Python package, libditrun.so, the ditc and
ditrun tools, and the shared libraries they need that a bare system may lack.

    python3 python/build_wheel.py [--build-dir build] [-o DIR]      -> DIR/ditrun-V-py3-none-linux_x86_64.whl

Also the package's PEP 517 backend (pyproject.toml: backend-path "."), so `pip wheel
--no-build-isolation --no-deps python/` builds the same wheel; the build directory is then
$DITRUN_BUILD_DIR (default ../build). Standard library only: CI may have no package index.

One wheel for every Python 3 and every torch: the package loads libditrun with ctypes, nothing in
it is compiled against Python (tag py3-none-linux_x86_64). Bundled libraries: the closure of
libditrun.so and ditrun as ldd resolves it (the Debian builds of cJSON, xxHash, zstd, curl,
OpenSSL and theirs) without glibc and the toolchain's runtimes, which every system has. ditc
is shipped, but not its LLVM/MLIR and CUDA toolkit libraries (hundreds of MiB; a host that
compiles installs llvm-19, libmlir-19 and the CUDA toolkit, as it would to build ditc);
lib/preload.txt lists the bundled libraries leaves first, for the package to load them before
libditrun (a bundled library's own dependencies are then found among them).
"""
import base64
import hashlib
import io
import os
import re
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
TAG = "py3-none-linux_x86_64"
# glibc and the toolchain runtimes (the sanitizers' too, of a sanitizer build: a second copy of
# one in a process is fatal): present wherever a C or C++ program runs, never bundled.
SYSTEM = re.compile(r"^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64|linux-vdso|libgcc_s|libstdc\+\+|"
                    r"libasan|libubsan|liblsan|libtsan)\.so")


def project():
    text = open(os.path.join(HERE, "pyproject.toml")).read()
    name = re.search(r'^name\s*=\s*"([^"]+)"', text, re.M).group(1)
    version = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M).group(1)
    summary = re.search(r'^description\s*=\s*"([^"]+)"', text, re.M).group(1)
    return name, version, summary


def ldd(path):
    """{soname: resolved path} of everything path loads; a missing one stops the build."""
    out = subprocess.run(["ldd", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(\S+)", line)
        if not m:
            continue
        if m.group(2) == "not":
            sys.exit("build_wheel: %s needs %s, which ldd does not find" % (path, m.group(1)))
        found[m.group(1)] = m.group(2)
    return found


def needed(path):
    out = subprocess.run(["readelf", "-d", path], stdout=subprocess.PIPE, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def leaves_first(libs):
    """The sonames of libs ordered so that each comes after the bundled libraries it needs."""
    order, seen = [], set()

    def visit(so):
        if so in seen:
            return
        seen.add(so)
        for dep in needed(libs[so]):
            if dep in libs:
                visit(dep)
        order.append(so)
    for so in sorted(libs):
        visit(so)
    return order


def files(build_dir):
    """(archive name, bytes, mode) of everything the wheel holds but its metadata."""
    lib = os.path.join(build_dir, "lib", "libditrun.so")
    tools = [os.path.join(build_dir, "bin", t) for t in ("ditrun", "ditc")]
    for p in [lib] + tools:
        if not os.path.exists(p):
            sys.exit("build_wheel: %s missing: build the targets ditrun_shared, ditrun and ditc first" % p)
    soname = os.path.basename(os.path.realpath(lib))
    soname = re.match(r"(libditrun\.so\.\d+)", soname).group(1)
    out = []
    pkg = os.path.join(HERE, "ditrun")
    for root, dirs, names in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "lib", "bin"))
        for n in sorted(names):
            if n.endswith((".py", ".md", ".json")):
                full = os.path.join(root, n)
                out.append(("ditrun/" + os.path.relpath(full, pkg), open(full, "rb").read(), 0o644))
    out.append(("ditrun/lib/" + soname, open(lib, "rb").read(), 0o755))
    out.append(("ditrun/include/ditrun_api.h", open(os.path.join(HERE, "..", "runtime", "ditrun_api.h"), "rb").read(), 0o644))
    for t in tools:
        out.append(("ditrun/bin/" + os.path.basename(t), open(t, "rb").read(), 0o755))
    bundled = {}
    for p in [lib, tools[0]]:
        for so, path in ldd(p).items():
            if not SYSTEM.match(so) and not so.startswith("libditrun"):
                bundled[so] = path
    order = leaves_first(bundled)
    for so in order:
        out.append(("ditrun/lib/" + so, open(bundled[so], "rb").read(), 0o755))
    out.append(("ditrun/lib/preload.txt", "".join(so + "\n" for so in order).encode(), 0o644))
    return out


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(build_dir, out_dir):
    name, version, summary = project()
    dist = "%s-%s.dist-info" % (name, version)
    entries = files(build_dir)
    entries.append((dist + "/METADATA", ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\nRequires-Python: >=3.8\n"
                                         "Provides-Extra: numpy\nRequires-Dist: numpy; extra == \"numpy\"\n"
                                         % (name, version, summary)).encode(), 0o644))
    entries.append((dist + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: ditrun build_wheel.py\nRoot-Is-Purelib: false\nTag: %s\n"
                                      % TAG).encode(), 0o644))
    record = "".join("%s,%s,%d\n" % (n, record_hash(d), len(d)) for n, d, _ in entries) + dist + "/RECORD,,\n"
    entries.append((dist + "/RECORD", record.encode(), 0o644))
    os.makedirs(out_dir, exist_ok=True)
    wheel = "%s-%s-%s.whl" % (name, version, TAG)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for n, data, mode in entries:
            info = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))  # reproducible bytes
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    with open(os.path.join(out_dir, wheel), "wb") as f:
        f.write(buf.getvalue())
    return wheel


def _build_dir(config_settings):
    d = (config_settings or {}).get("build-dir") or os.environ.get("DITRUN_BUILD_DIR") or os.path.join(HERE, "..", "build")
    return os.path.abspath(d)


# ---- PEP 517 ----
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return build(_build_dir(config_settings), wheel_directory)


def build_sdist(sdist_directory, config_settings=None):
    raise RuntimeError("ditrun ships as a wheel built from a CMake build (python/build_wheel.py); there is no sdist")


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default=_build_dir(None))
    ap.add_argument("-o", "--out", default=os.path.join(os.getcwd(), "dist"))
    a = ap.parse_args(argv)
    print(os.path.join(a.out, build(os.path.abspath(a.build_dir), a.out)))


if __name__ == "__main__":
    main(sys.argv[1:])
