#!/usr/bin/env bash
# Pack what the GPU machine needs beside the checkout (the SGLang bundle, the testbed GGUF, the datasets, and
# SGLang's own DFLASH tests where .device/peers holds them)
# into .device/p1/g, p2/g, ...: one piece per device call, each call under 64 MiB with this checkout
# (tracked and untracked-not-ignored files travel too). scripts/h200.sh joins and unpacks them.
#   bash scripts/pack_device.sh SmolLM2-135M-Instruct.Q4_1.gguf [DATA_DIR]   (rerun when the checkout grows)
#   bash scripts/pack_device.sh --check    exit 1 unless every piece still fits beside the checkout
#                                                  (run it before the first device call: a refused call costs time)
# Pack and call with the results data out of the index (scripts/device_lean.sh drop, then restore):
# three pieces instead of fourteen.
# Files in .device/data travel beside the datasets. The drafter job trains on GSM8K's train split where
# gsm8k_train.jsonl.gz is there (its questions only, 0.6 MB; from `fetch github:openai/grade-school-math`):
#   git --git-dir MIRROR show 3101c7d:grade_school_math/data/train.jsonl | python3 -c 'import json, sys
#   [print(json.dumps({"question": json.loads(l)["question"]})) for l in sys.stdin]' | gzip -9n > .device/data/gsm8k_train.jsonl.gz
set -euo pipefail
LIMIT=$((64 * 1024 * 1024))
MARGIN=$((1024 * 1024))
# What a call counts: the tracked and untracked-not-ignored files at their allocated sizes (4 KiB blocks),
# summed file by file, plus what it carries; .git does not count. Seen on 2026-12-02: 53.2 MiB of tracked
# files + a 15.3 MiB piece was refused; 17.2 MiB (scripts/device_lean.sh drop) + 45 MiB was carried.
tree=$( (git ls-files -z; git ls-files -z --others --exclude-standard) | xargs -0 -r stat -c '%b %B' 2>/dev/null \
  | awk '{s += $1 * $2} END {print s + 0}')
if [ "${1:-}" = --check ]; then
  largest=$(du -b .device/p[0-9]*/g 2>/dev/null | sort -n | tail -1 | cut -f1)
  [ -n "$largest" ] || { echo "no pieces in .device: pack first" >&2; exit 1; }
  if [ $((tree + largest + MARGIN)) -gt "$LIMIT" ]; then
    echo "checkout $tree B + piece $largest B + 1 MiB > 64 MiB: pack again" >&2
    exit 1
  fi
  echo "ok: checkout $tree B + largest piece $largest B + 1 MiB <= 64 MiB; pieces: $(ls -d .device/p[0-9]* | wc -l)"
  exit 0
fi
GGUF=$1
DATA=${2:-../shared/data}
piece=$((LIMIT - tree - MARGIN))
[ "$piece" -gt $((4 * 1024 * 1024)) ] || { echo "the checkout ($tree B) leaves no room for pieces" >&2; exit 2; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/payload/data"
cp .device/sglang/install_sglang_bundle.sh .device/sglang/site.tar.xz "$stage/payload/" 2>/dev/null \
  || { echo "no SGLang bundle in .device/sglang (bash ../shared/device/prepare_sglang_bundle.sh .device/sglang)" >&2; exit 2; }
cp "$DATA"/*.jsonl "$DATA"/*.gz "$stage/payload/data/"
[ -d .device/data ] && cp .device/data/* "$stage/payload/data/"
cp "$GGUF" "$stage/payload/smol.gguf"
# SGLang's own DFLASH tests and its sglang/test package, where scripts/peer_tests.py gather put them (h200.sh peers)
[ -d .device/peers ] && tar czf "$stage/payload/peers.tgz" -C .device peers
rm -rf .device/p[0-9]* .device/c[0-9]*
tar cf - -C "$stage" payload | split -b "$piece" -d -a 2 - "$stage/part."
n=0
for part in "$stage"/part.*; do
  n=$((n + 1))
  mkdir -p ".device/p$n" && mv "$part" ".device/p$n/g"
done
ls -l .device/p*/g
echo "$n pieces of at most $piece B; calls: setup (p1), carry (p2 .. p$((n - 1))), serve (p$n)"
