#!/usr/bin/env bash
# Cut the testbed GGUF into .device/c1/g, c2/g, ... so each device call stays under 64 MiB with this
# checkout (tracked and untracked-not-ignored files travel too): c1 rides with the SGLang bundle
# (.device/sglang), each later piece alone, the last with .device/data (1 MiB kept for it).
#   bash results/sglang/split_gguf.sh SmolLM2-135M-Instruct.Q4_1.gguf
set -euo pipefail
GGUF=$1
LIMIT=$((64 * 1024 * 1024))
MARGIN=$((2 * 1024 * 1024))
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
bundle=$(du -sb .device/sglang | cut -f1)
piece=$((LIMIT - tree - MARGIN))
first=$((piece - bundle))
if [ $((tree + bundle)) -gt "$LIMIT" ]; then echo "the checkout ($tree B) and the bundle ($bundle B) exceed 64 MiB" >&2; exit 2; fi
[ "$first" -lt 0 ] && first=0  # c1 empty: the bundle's call carries no piece
rm -rf .device/c[0-9]*
size=$(stat -c %s "$GGUF")
offset=0 n=1 take=$first
[ "$first" -eq 0 ] && mkdir -p .device/c1 && : > .device/c1/g && n=2 take=$piece
while [ "$offset" -lt "$size" ]; do
  mkdir -p ".device/c$n"
  dd if="$GGUF" of=".device/c$n/g" bs=1M iflag=skip_bytes,count_bytes skip="$offset" count="$take" status=none
  offset=$((offset + take)); n=$((n + 1)); take=$piece
done
ls -l .device/c*/g
for i in $(seq 1 $((n - 1))); do cat ".device/c$i/g"; done | sha256sum
