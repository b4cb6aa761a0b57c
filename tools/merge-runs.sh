#!/usr/bin/env bash
# Add the finished runs of a tarball from tools/sweep-elsewhere.sh to a committed sweep folder: a run already
# there is kept as it is (never overwritten), so merging twice, or merging two machines' results, is safe.
#   tools/merge-runs.sh RUNS_TGZ DOCS_DIR
set -euo pipefail
# A tarball split for a device call's 16 MiB a file (RUNS_TGZ.part00, .part01, ...) is joined when RUNS_TGZ is absent.
tgz=$1; docs=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [ -f "$tgz" ]; then tar xzf "$tgz" -C "$tmp"; else cat "$tgz".part* | tar xz -C "$tmp"; fi
n=0; shopt -s nullglob  # an empty tarball merges nothing
for d in "$tmp"/*/; do
  name=$(basename "$d")
  [ -f "$docs/runs/$name/summary.json" ] && continue
  mkdir -p "$docs/runs/$name" && cp "$d"* "$docs/runs/$name/" && n=$((n + 1))
done
echo "merge-runs: $n new run(s) in $docs/runs"
