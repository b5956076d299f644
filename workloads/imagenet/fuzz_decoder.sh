#!/usr/bin/env bash
# Fuzzes the imagenet workload's image decoder (JPEG and PNG) with libFuzzer,
# AddressSanitizer and UndefinedBehaviorSanitizer, for a bounded time. Not
# part of CI. Needs clang (Debian: clang, which ships libFuzzer) besides the
# build dependencies.
#
# Usage: workloads/imagenet/fuzz_decoder.sh [SECONDS]     (default 60)
#   The seed corpus is a few generated JPEGs (colour, grayscale, CMYK,
#   progressive via PIL) and a PNG; crashes land in $FUZZ_DIR (default
#   ${TMPDIR:-/tmp}/batchd-fuzz-decoder).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
seconds="${1:-60}"
dir="${FUZZ_DIR:-${TMPDIR:-/tmp}/batchd-fuzz-decoder}"
mkdir -p "$dir/corpus" "$dir/crashes"
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined \
  -I"$repo" "$here/image_decoder_fuzz.cc" "$here/image_decoder.cc" \
  "$here/resample.cc" "$here/transforms.cc" \
  -ljpeg -lpng -labsl_status -labsl_strings -labsl_cord -labsl_str_format_internal \
  -labsl_strings_internal -labsl_int128 -labsl_raw_logging_internal \
  -labsl_throw_delegate -labsl_base -labsl_spinlock_wait \
  -o "$dir/image_decoder_fuzz"
if [[ -z "$(ls -A "$dir/corpus")" ]]; then
  /usr/bin/python3 - "$dir/corpus" <<'PY'
import io, sys
import numpy as np
from PIL import Image
out = sys.argv[1]
rng = np.random.default_rng(0)
a = (rng.random((48, 64, 3)) * 255).astype(np.uint8)
img = Image.fromarray(a)
for name, im, kw in [("rgb.jpg", img, {"quality": 90}),
                     ("gray.jpg", img.convert("L"), {}),
                     ("cmyk.jpg", img.convert("CMYK"), {}),
                     ("prog.jpg", img, {"progressive": True}),
                     ("444.jpg", img, {"subsampling": 0})]:
    im.save(f"{out}/{name}", "JPEG", **kw)
img.save(f"{out}/rgb.png", "PNG")
img.convert("P").save(f"{out}/palette.png", "PNG")
PY
fi
"$dir/image_decoder_fuzz" -max_total_time="$seconds" -max_len=65536 \
  -rss_limit_mb=2048 -artifact_prefix="$dir/crashes/" "$dir/corpus"
