#!/usr/bin/env bash
# issue 40, third device call (an H200): the five sweeps of device-call-2.sh continue where they stand (Post-LN
# without warm-up, its last bisection round at d=512; the warm-up arm and Pre-LN at d=64-512, grids then the edge
# search), 2+3+4+4+4 jobs x 1 thread; Pre-LN with warm-up left out (its 140 grid runs do not fit). Beside them, three
# finished H100 runs trained again from their config.yaml: is an H200 the H100 for these runs' numerics?
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-500}; W=gpujob/width-gpu
export PYTHONUNBUFFERED=1 NORMLAB_CACHE=/tmp/nlc
echo "start $(date -u +%T); $(nproc) cores"; nvidia-smi -L
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).multi_processor_count, 'SMs')"
mkdir -p $W && tar xzf gpujob/runs.tgz -C $W && echo "$(ls $W/runs | wc -l) committed runs"
PYTHONPATH=$PWD OMP_NUM_THREADS=8 python3 gpujob/device-prep.py 2>&1 | tail -1  # the data cache, once
mkdir -p /tmp/rr
for f in gpujob/repro/*.yaml; do n=$(basename $f .yaml)
  (OMP_NUM_THREADS=1 python3 -m normlab train --config $f --out /tmp/rr/$n --quiet --threads 1 > /tmp/rr/$n.log 2>&1) &
done
C="--scale quick --set seeds=5 --threads 1 --device cuda --no-diagnose --no-estimate"
left=$(( DEADLINE - ($(date +%s) - T0) ))
go() { n=$1; shift; tools/sweep-elsewhere.sh "$W" $left "$OUT/$n" -- $C "$@" 2>&1 | grep -v "^\[" | sed -u "s/^/$n: /"; }
go a --jobs 2 --set 'widths=[64,128,256,512]' --set 'schemes=[post]' --set 'warmups=[none]' &
go b --jobs 3 --set 'widths=[64,128]' --set 'schemes=[post]' --set 'warmups=[adam]' &
go c --jobs 4 --set 'widths=[64,128]' --set 'schemes=[pre]' --set 'warmups=[none]' &
go d --jobs 4 --set 'widths=[256,512]' --set 'schemes=[post]' --set 'warmups=[adam]' &
go e --jobs 4 --set 'widths=[256,512]' --set 'schemes=[pre]' --set 'warmups=[none]' &
while [ -n "$(jobs -r)" ]; do sleep 30; echo "t=$(( $(date +%s) - T0 ))s: $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader)"; done
wait
(cd /tmp/rr && tar czf $OUT/repro.tgz */summary.json */metrics.jsonl *.log)
for n in a b c d e; do sed "s/^/$n: /" $OUT/$n/sweep.log; rm -f $OUT/$n/sweep.log; done > $OUT/sweep-logs.txt
echo "end $(date -u +%T), $(( $(date +%s) - T0 )) s"
