#!/usr/bin/env bash
# issue 40, second call: post/none's last bisection round, the edge search of post/adam and pre/none at d=64,128,
# and their grids at d=256,512, five sweeps at once (tools/sweep-elsewhere.sh; finished runs' small files back)
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-220}; W=gpujob/width-gpu
export PYTHONUNBUFFERED=1 NORMLAB_CACHE=/tmp/nlc
echo "start $(date -u +%T); $(nproc) cores"; nvidia-smi -L
PYTHONPATH=$PWD OMP_NUM_THREADS=8 python3 gpujob/prep.py 2>&1 | tail -1
C="--scale quick --set seeds=5 --threads 1 --device cuda --no-diagnose --no-estimate"
left=$(( DEADLINE - ($(date +%s) - T0) ))
go() { n=$1; shift; tools/sweep-elsewhere.sh "$W" $left "$OUT/$n" -- $C "$@" 2>&1 | grep -v "^\[" | sed -u "s/^/$n: /"; }
go a --jobs 3 --set 'widths=[64,128,256,512]' --set 'schemes=[post]' --set 'warmups=[none]' &
go b --jobs 3 --set 'widths=[64,128]' --set 'schemes=[post]' --set 'warmups=[adam]' &
go c --jobs 3 --set 'widths=[64,128]' --set 'schemes=[pre]' --set 'warmups=[none]' &
go d --jobs 4 --set 'widths=[256,512]' --set 'schemes=[post]' --set 'warmups=[adam]' &
go e --jobs 4 --set 'widths=[256,512]' --set 'schemes=[pre]' --set 'warmups=[none]' &
wait; for n in a b c d e; do sed "s/^/$n: /" $OUT/$n/sweep.log; rm -f $OUT/$n/sweep.log; done > $OUT/sweep-logs.txt
echo "end $(date -u +%T), $(( $(date +%s) - T0 )) s"
