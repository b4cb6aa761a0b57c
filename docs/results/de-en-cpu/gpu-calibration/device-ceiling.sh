#!/usr/bin/env bash
# Issue 37's open question, for the next session lent a GPU: what test BLEU does the vendored de-en corpus allow?
# The runs so far stopped while rising (run A, the paper's d=512 shape, 16.5 test BLEU after 3 epochs; the CPU
# recipe 14.3 after 4.5 epochs, 33.0 after 14 on a Zen 5), so the ceiling is unmeasured. The recipe's length is
# fixed here (budget_hours=0: the call's updates), its rate linear from the first update. This trains run A's shape (Pre-LN 6-6, d=512, FFN 1024, 4
# heads, 4,096 tokens, Adam 0.9/0.98, 5e-4 from the first update) for UPDATES updates (default 8,000: 12 epochs of
# 660) with the rate linear to 0 at the last one, so that its curve flattens inside the call, BLEU on 300
# validation sentences after each epoch, and the test split (2,000 pairs, beam 5, length penalty 1.2) with the
# last checkpoint at the end. On the H100 three runs shared, an update took 0.06 s; alone ~0.03-0.05 (launch-bound):
# 8,000 updates and 12 evaluations fit one 600-second call with the start-up. MAX_HOURS stops it with a checkpoint
# (then test BLEU of that checkpoint) if the machine is slower.
#
# The call, from the repository's root (the device tool copies the working tree):
#   OUT=$OUT bash docs/results/de-en-cpu/gpu-calibration/device-ceiling.sh        (timeout_s 600)
# Back here: copy $OUT/ceiling-d512/{config.yaml,data.json,metrics.jsonl,summary.json}, eval/*.json and
# $OUT/train.log into runs/ceiling-d512/ and write the curve (epoch, valid BLEU, valid NLL) and the test BLEU into README.md;
# `python docs/results/de-en-cpu/curves.py` draws it beside the others. The same script runs on a CPU
# (DEVICE=cpu, hours); SMOKE=1 runs a tiny version anywhere in a minute (tests/test_configs.py runs it). `python3`
# must be one with normlab's requirements (the device machine's; here, a venv's bin first on PATH).
set -u
OUT=${OUT:-/tmp/out}; DEVICE=${DEVICE:-cuda}; UPDATES=${UPDATES:-8000}; MAX_HOURS=${MAX_HOURS:-0.135}
export PYTHONUNBUFFERED=1 NORMLAB_CACHE=${NORMLAB_CACHE:-/tmp/nlc}
echo "start $(date -u +%T); $(nproc) cores"; nvidia-smi -L 2>/dev/null
SIZE=(--set model.d_model=512 --set model.d_ffn=1024 --set valid_bleu=300)
if [ "${SMOKE:-0}" = 1 ]; then  # a tiny model on a few hundred pairs: the script's plumbing, not a result
  SIZE=(--set model.d_model=32 --set model.d_ffn=64 --set model.encoder_layers=1 --set model.decoder_layers=1
        --set data.train_subset=400 --set valid_bleu=8 --set data.vocab_size=1000 --set data.max_tokens=512)
  UPDATES=${UPDATES_SMOKE:-6}
fi
python3 -m normlab train --config de-en-cpu --out "$OUT/ceiling-d512" --quiet "${SIZE[@]}" \
  --set device="$DEVICE" --set optim.lr=5e-4 --set max_updates="$UPDATES" --set max_hours="$MAX_HOURS" \
  --set budget_hours=0 --set schedule.decay_from=0 \
  --set save_every=0 --set keep_last=1 2>&1 | tee "$OUT/train.log" | tail -20
python3 - "$OUT/ceiling-d512" <<'EOF'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
s = json.loads((run / "summary.json").read_text())
print("status", s.get("status"), "update", s.get("update"), "stopped_by", s.get("stopped_by"), "elapsed_s", s.get("elapsed_s"))
for line in (run / "metrics.jsonl").read_text().splitlines():
    r = json.loads(line)
    if r.get("type") == "valid":
        print(f"epoch {r.get('epoch')} update {r.get('update')}: valid nll {r.get('nll'):.3f}, BLEU {r.get('bleu')}")
print("test", {k: s.get("test", {}).get(k) for k in ("checkpoint", "bleu", "bleu_tokenized", "nll")})
EOF
echo "end $(date -u +%T)"
