#!/usr/bin/env bash
# Regenerates the output block of chapters/ch13_quantization/README.md from a run of the chapter's
# program (its ctest, chapter.ch13_quantization, fails when the block and a run disagree).
#   chapters/ch13_quantization/update_readme.sh [BUILD_DIR]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
cmake --build "$BUILD" --target ch13_quantization
"$BUILD/chapters/ch13_quantization" --write-readme chapters/ch13_quantization/README.md
