#!/usr/bin/env bash
# A device call carries the checkout's tracked files (allocated sizes, 4 KiB blocks) with what it names in
# `carry`, 64 MiB in all; .git does not count. The results data (about 36 MiB) leaves little room for the
# pieces of scripts/pack_device.sh. `drop` takes the results folders out of the index and ignores
# them (the files stay on disk), so that a device session carries about 17 MiB of checkout and pieces of
# 44 MiB; `restore` puts the index and .git/info/exclude back. Run `restore` before any commit.
#   bash scripts/device_lean.sh drop | restore | status
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mark=.git/info/exclude.before-lean
case ${1:-status} in
drop)
  [ -f "$mark" ] && { echo "already lean (restore first)" >&2; exit 2; }
  git diff --cached --quiet || { echo "staged changes: commit or unstage them first" >&2; exit 2; }
  cp .git/info/exclude "$mark"
  printf '/results/*/*/\n' >> .git/info/exclude
  git ls-files -z 'results/*/*/*' | xargs -0 -r git rm -q --cached --
  echo "lean: results data left out of the index; run 'bash $0 restore' before committing"
  ;;
restore)
  [ -f "$mark" ] || { echo "not lean"; exit 0; }
  git reset -q -- results
  mv "$mark" .git/info/exclude
  echo "restored"
  ;;
status)
  [ -f "$mark" ] && echo lean || echo "not lean"
  ;;
*) echo "usage: $0 drop | restore | status" >&2; exit 2 ;;
esac
