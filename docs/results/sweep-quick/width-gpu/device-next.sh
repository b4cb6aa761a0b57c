#!/usr/bin/env bash
# The next device call for this folder (issue 40): device-call-2.sh's five sweeps, which continue where they
# stand, and Pre-LN with the warm-up, six at once (3 jobs x 1 thread each) for DEADLINE seconds. Before the call,
# on this machine, from the repository's root (the tracked tree must fit the device tool's 64 MiB):
#   mkdir -p gpujob/width-gpu && cp -r docs/results/sweep-quick/width-gpu/runs gpujob/width-gpu/ && \
#   cp docs/results/sweep-quick/width-gpu/device-*.{sh,py} gpujob/ && \
#   git rm -r -q --cached docs/results/sweep-quick docs/results/sweep-lm && \
#   mv docs/results/sweep-quick docs/results/sweep-lm /somewhere/outside/
# the call: `DEADLINE=540 bash gpujob/device-next.sh` (timeout_s 600); after it: move both folders back, `git reset
# -q`, and `tools/merge-runs.sh OUT/X/runs.tgz docs/results/sweep-quick/width-gpu` for X in a..f.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-540}; W=gpujob/width-gpu
export PYTHONUNBUFFERED=1 NORMLAB_CACHE=/tmp/nlc
echo "start $(date -u +%T); $(nproc) cores"; nvidia-smi -L
PYTHONPATH=$PWD OMP_NUM_THREADS=8 python3 gpujob/device-prep.py 2>&1 | tail -1  # the data cache, once
C="--scale quick --set seeds=5 --threads 1 --device cuda --no-diagnose --no-estimate"
left=$(( DEADLINE - ($(date +%s) - T0) ))
go() { n=$1; shift; tools/sweep-elsewhere.sh "$W" $left "$OUT/$n" -- $C "$@" 2>&1 | grep -v "^\[" | sed -u "s/^/$n: /"; }
go a --jobs 3 --set 'widths=[64,128,256,512]' --set 'schemes=[post]' --set 'warmups=[none]' &
go b --jobs 3 --set 'widths=[64,128]' --set 'schemes=[post]' --set 'warmups=[adam]' &
go c --jobs 3 --set 'widths=[64,128]' --set 'schemes=[pre]' --set 'warmups=[none]' &
go d --jobs 3 --set 'widths=[256,512]' --set 'schemes=[post]' --set 'warmups=[adam]' &
go e --jobs 3 --set 'widths=[256,512]' --set 'schemes=[pre]' --set 'warmups=[none]' &
go f --jobs 3 --set 'widths=[64,128,256,512]' --set 'schemes=[pre]' --set 'warmups=[adam]' &
while [ -n "$(jobs -r)" ]; do sleep 30; echo "t=$(( $(date +%s) - T0 ))s: $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader)"; done
wait; for n in a b c d e f; do sed "s/^/$n: /" $OUT/$n/sweep.log; rm -f $OUT/$n/sweep.log; done > $OUT/sweep-logs.txt
echo "end $(date -u +%T), $(( $(date +%s) - T0 )) s"
