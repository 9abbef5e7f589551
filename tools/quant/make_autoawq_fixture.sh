#!/usr/bin/env bash
# Remakes tests/data/quantized/autoawq-tiny{,-expected}/ with AutoAWQ's own package (see
# make_autoawq_fixture.py). AutoAWQ 0.2.9 and the packages its modules import but the project's venv
# lacks are installed with --no-deps into a git-ignored folder beside the venv's (torch and
# transformers come from the venv: AutoAWQ's last tested configuration is transformers 4.51.3, the
# venv's). Run from the repository root after scripts/install-deps.sh and a build:
#   bash tools/quant/make_autoawq_fixture.sh [build/src/cli/journey]
set -euo pipefail
cd "$(dirname "$0")/../.."
bash tools/python/make-venv.sh > /dev/null
venv_python=tools/python/venv-python
target=build/autoawq-pkgs
if [ ! -f "$target/.done" ]; then
  mkdir -p "$target"
  python3 -m pip install --quiet --no-deps --target "$target" \
    autoawq==0.2.9 datasets==3.6.0 dill==0.3.8 multiprocess==0.70.16 xxhash==3.5.0 pyarrow==20.0.0 \
    pandas==2.2.3 pytz==2025.2 tzdata==2025.2 python-dateutil==2.9.0.post0 six==1.17.0 zstandard==0.23.0
  touch "$target/.done"
fi
journey_bin=${1:-build/src/cli/journey}
args=()
[ -x "$journey_bin" ] && args=(--journey "$journey_bin")
PYTHONPATH="$target" "$venv_python" tools/quant/make_autoawq_fixture.py "${args[@]}"
