#!/usr/bin/env bash
# The next device call for this folder (issue 40). After device-call-3.sh and -4.sh (2026-11-28, an H200) every
# Post-LN curve, both arms, and Pre-LN without warm-up are bracketed at d = 64-512; what is left is Pre-LN with the
# 100-update warm-up: d = 64's last bisection rounds, d = 128 from 4.64e-3 up, d = 256 and 512 from their grids
# (174 runs: call 5 of 2026-11-28 trained them all in 6.2 min of one H200 and lost them, README "Left"; the tarball
# now holds only what the call trained, ~3 MB, split if over 15 MB). One sweep, 15 jobs x 1 thread.
# Before the call, on this machine, from the repository's root (what travels must fit the device tool's 64 MiB;
# docs/results alone is 400+ MiB, and this folder's runs/ 59 MB, so runs/ travels as a tarball):
#   mkdir -p gpujob && tar czf gpujob/runs.tgz -C docs/results/sweep-quick/width-gpu runs && \
#   cp docs/results/sweep-quick/width-gpu/device-{next.sh,prep.py} gpujob/ && \
#   git rm -r -q --cached docs/results && mv docs/results /somewhere/outside/
# the call: `DEADLINE=520 bash gpujob/device-next.sh 2>&1 | tee $OUT/call.log` (timeout_s 580, which leaves the
# machine's start, ~1-2 min, inside a 15-minute lease); after it: move docs/results back, `git reset -q`,
# `tools/merge-runs.sh OUT/f/runs.tgz docs/results/sweep-quick/width-gpu` (split parts are joined), and the
# report (README.md, end).
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-520}; W=gpujob/width-gpu
export PYTHONUNBUFFERED=1 NORMLAB_CACHE=/tmp/nlc
echo "start $(date -u +%T); $(nproc) cores"; nvidia-smi -L
mkdir -p $W && tar xzf gpujob/runs.tgz -C $W && echo "$(ls $W/runs | wc -l) committed runs"
PYTHONPATH=$PWD OMP_NUM_THREADS=8 python3 gpujob/device-prep.py 2>&1 | tail -1  # the data cache, once
C="--scale quick --set seeds=5 --threads 1 --device cuda --no-diagnose --no-estimate"
left=$(( DEADLINE - ($(date +%s) - T0) ))
go() { n=$1; shift; tools/sweep-elsewhere.sh "$W" $left "$OUT/$n" -- $C "$@" 2>&1 | grep -v "^\[" | sed -u "s/^/$n: /"; }
go f --jobs 15 --set 'widths=[64,128,256,512]' --set 'schemes=[pre]' --set 'warmups=[adam]' &
while [ -n "$(jobs -r)" ]; do sleep 30; echo "t=$(( $(date +%s) - T0 ))s: $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader)"; done
wait; echo "end $(date -u +%T), $(( $(date +%s) - T0 )) s"
