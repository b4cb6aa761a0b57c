"""Does a masked-LM checkpoint use its context? Loss at the masked positions with the context intact, against
the same positions with every other text token replaced at random, or by [MASK] (context destroyed).

    .venv/bin/python docs/results/reproduce-full/bert-calibration/context.py RUN [best|last]

(RUN: a run folder with its checkpoints; the committed runs here have none: they are the small files only.)"""
import sys, numpy as np, torch, torch.nn.functional as F
from normlab.pretrained import locate_pretrained
from normlab.data.datasets import prepare
from normlab.data.batch import PAD, MASK
from normlab.data.tokenizer import NUM_SPECIAL
torch.set_num_threads(1)
p = locate_pretrained(sys.argv[1], which=sys.argv[2] if len(sys.argv) > 2 else "best")
print(p.describe())
prep = prepare(p.cfg.data, p.cfg.model.max_positions)
valid = prep.splits["valid"]
model = p.masked_lm()
g = np.random.default_rng(0)
with torch.no_grad():
    tot = {"intact": [0.0, 0], "context random": [0.0, 0], "context all [MASK]": [0.0, 0]}
    for start in range(0, 256, 32):
        b = valid.collate(np.arange(start, start + 32), seed=1, epoch=0)
        sel = b.targets != PAD
        variants = {"intact": b.tokens}
        t = b.tokens.clone(); other = (~sel) & (t >= NUM_SPECIAL)
        t[other] = torch.from_numpy(g.integers(NUM_SPECIAL, p.cfg.model.vocab_size, int(other.sum())))
        variants["context random"] = t
        t2 = b.tokens.clone(); t2[other] = MASK
        variants["context all [MASK]"] = t2
        for k, x in variants.items():
            logits = model(x, b.segments, select=sel)
            tot[k][0] += F.cross_entropy(logits.float(), b.targets[sel], reduction="sum").item(); tot[k][1] += int(sel.sum())
    for k, (s, n) in tot.items():
        print(f"{k:22s} NLL {s / n:.3f} over {n} masked targets")
    tok = p.tokenizer()
    b = valid.collate(np.arange(0, 1), seed=1, epoch=0); sel = b.targets != PAD
    logits = model(b.tokens, b.segments)
    top = logits[0].argmax(-1)
    ids = b.tokens[0].tolist()
    print("input :", " ".join(tok.id_to_piece(i) if hasattr(tok, "id_to_piece") else str(i) for i in ids[:60]))
    print("target:", [tok.id_to_piece(int(b.targets[0, j])) for j in range(60) if sel[0, j]])
    print("argmax:", [tok.id_to_piece(int(top[j])) for j in range(60) if sel[0, j]])
