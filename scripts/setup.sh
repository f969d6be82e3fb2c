#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, when they are missing. Tests may use
# nothing else: scripts/check_test_deps.py (run by the suite) refuses a Python import that is
# neither in the standard library nor on the next line.
# python-modules: numpy
# chromium-headless-shell: the serve status page's test renders it (--dump-dom); Debian's smaller
# headless-only build of chromium (64 MB download against 81 MB, no X11 browser).
# libsentencepiece-dev, libutf8proc-dev: the tokenizers (text/): SentencePiece models and the Unicode
# data of CLIP's BPE.
# libspng-dev, libavcodec-dev, libavformat-dev, libswscale-dev, libavutil-dev: output files
# (runtime/media.c): PNG, and H.264 MP4 (Debian's libavcodec encodes H.264 through libx264).
# valgrind: memcheck over the tests whose buffers those uninstrumented libraries read
# (tests/tools/valgrind_run.sh), where AddressSanitizer sees nothing.
set -euo pipefail
pkgs=(build-essential cmake clang python3 libxxhash-dev libzstd-dev libcjson-dev libmlir-19-dev llvm-19-dev
      libcurl4-openssl-dev libssl-dev libsentencepiece-dev libutf8proc-dev pkg-config libmicrohttpd-dev nginx
      libspng-dev libavcodec-dev libavformat-dev libswscale-dev libavutil-dev
      python3-numpy python3-venv python3-pip chromium-headless-shell valgrind)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi
if [ ! -f /usr/local/cuda/include/nvrtc.h ]; then
  echo "setup: the CUDA toolkit is expected at /usr/local/cuda (NVRTC, nvJitLink); configure with -DDIT_CUDA=OFF to build without GPU codegen" >&2
fi
