#!/usr/bin/env bash
# issue 40 on the lent GPU: Post-LN without warm-up (4 widths, edge search), Post-LN with the adam warm-up and
# Pre-LN without, three sweeps at once into scratch copies of the committed width-gpu runs; only finished runs'
# small files come back (tools/sweep-elsewhere.sh). DEADLINE: seconds from start at which every sweep stops.
set -u
T0=$(date +%s); DEADLINE=${DEADLINE:-530}; W=${W:-gpujob/width-gpu}; DEV=${DEV:-cuda}
export PYTHONUNBUFFERED=1 NORMLAB_CACHE=${NORMLAB_CACHE:-/tmp/nlc}
echo "start $(date -u +%T); $(nproc) cores"; nvidia-smi -L 2>/dev/null
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name(0))"
OMP_NUM_THREADS=4 python3 gpujob/prep.py 2>&1 | tail -1   # the cache once, before three sweeps race to build it
COMMON=${COMMON:-"--scale quick --set seeds=5 --set widths=[64,128,256,512] --threads 1 --device $DEV --no-diagnose --no-estimate"}
left=$(( DEADLINE - ($(date +%s) - T0) ))
tools/sweep-elsewhere.sh "$W" $left "$OUT/a" -- $COMMON --jobs ${JA:-8} --set 'schemes=[post]' --set 'warmups=[none]' 2>&1 | sed -u "s/^/a: /" &
tools/sweep-elsewhere.sh "$W" $left "$OUT/b" -- $COMMON --jobs ${JB:-5} --set 'schemes=[post]' --set 'warmups=[adam]' 2>&1 | sed -u "s/^/b: /" &
tools/sweep-elsewhere.sh "$W" $left "$OUT/c" -- $COMMON --jobs ${JC:-5} --set 'schemes=[pre]' --set 'warmups=[none]' 2>&1 | sed -u "s/^/c: /" &
while [ -n "$(jobs -r)" ]; do sleep 30; echo "t=$(( $(date +%s) - T0 ))s: $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null)"; done
wait; echo "end $(date -u +%T), $(( $(date +%s) - T0 )) s"
