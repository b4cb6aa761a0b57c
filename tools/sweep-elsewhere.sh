#!/usr/bin/env bash
# Continue a committed sweep on another machine (a many-core CPU, a lent GPU machine) and bring back only the
# finished runs' small files, so that a grid completes over several machines and no finished run is trained twice.
# (`normlab sweep --sync DIR` does the taking and the copying itself, run by run as each ends; this script adds the
# time limit and a tarball to carry back from a machine whose files do not outlive the call.)
#
#   tools/sweep-elsewhere.sh DOCS_DIR SECONDS OUT_DIR -- SWEEP_ARGS...
#
# DOCS_DIR: the committed sweep folder (its runs/ holds config.yaml, data.json, metrics.jsonl, summary.json per
# finished run); the sweep runs in a scratch copy of it for at most SECONDS (what is still running then is
# stopped: the next call trains it again from its start), and OUT_DIR receives runs.tgz (the runs this call
# finished, small files only: not the committed ones, whose copy would outgrow what a device call brings back,
# 16 MiB a file) and sweep.log. SWEEP_ARGS are `normlab sweep`'s own (--scale, --set, --jobs,
# --threads, --device ...), without --out. Back home: tools/merge-runs.sh OUT_DIR/runs.tgz DOCS_DIR.
# `python3` on PATH runs normlab (a venv's, or a machine's own with torch, sentencepiece and sacrebleu); run it
# from the repository's root (or with PYTHONPATH naming it). Checked with the smoke preset: a second call on the
# merged folder trains nothing. Example (the quick preset's five seeds on 16 cores):
#   tools/sweep-elsewhere.sh docs/results/sweep-quick/edge-quick 520 "$OUT" -- --scale quick --set seeds=5 \
#     --jobs 16 --threads 1 --device cpu --no-diagnose --no-estimate
set -uo pipefail
docs=$1; seconds=$2; out=$3; shift 3; [ "${1:-}" = "--" ] && shift
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT  # the scratch copy holds checkpoints: only the tarball leaves
mkdir -p "$scratch/runs" "$out"
# absolute paths: the tarball is written from inside the scratch copy (a relative DOCS_DIR once let every
# committed run travel back, over a device call's 16 MiB a file)
docs=$(realpath -m "$docs"); out=$(realpath "$out")
[ -d "$docs/runs" ] && cp -r "$docs/runs/." "$scratch/runs/"
echo "sweep-elsewhere: $(ls "$scratch/runs" | wc -l) committed runs copied; $(nproc) CPUs;" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} timeout "$seconds" python3 -m normlab sweep --out "$scratch" "$@" \
  > "$out/sweep.log" 2>&1
echo "sweep-elsewhere: sweep rc=$? (124: stopped at ${seconds} s)"; tail -3 "$out/sweep.log"
cd "$scratch/runs" || exit 1
done_runs=()
for d in */; do
  d=${d%/}
  [ -f "$docs/runs/$d/summary.json" ] && continue  # committed already: only what this call trained travels back
  grep -qs '"status": "\(completed\|diverged\)"' "$d/summary.json" && done_runs+=("$d")
done
files=()
for d in ${done_runs[@]+"${done_runs[@]}"}; do for f in config.yaml data.json metrics.jsonl summary.json; do
  [ -f "$d/$f" ] && files+=("$d/$f"); done; done
tar czf "$out/runs.tgz" -T /dev/null ${files[@]+"${files[@]}"}  # empty when nothing finished (bash < 4.4 too)
echo "sweep-elsewhere: ${#done_runs[@]} runs finished by this call in $out/runs.tgz" \
  "($(du -h "$out/runs.tgz" | cut -f1))"
# a file over 16 MiB does not come back from a device call: split it (tools/merge-runs.sh joins the parts)
if [ "$(stat -c%s "$out/runs.tgz")" -gt 15000000 ]; then
  split -b 15M -d "$out/runs.tgz" "$out/runs.tgz.part" && rm "$out/runs.tgz" && echo "sweep-elsewhere: split into" \
    "$(ls "$out" | grep -c '^runs.tgz.part')"
fi
