"""Decoding speed: normlab's beam search against Hugging Face ``generate``, same weights, same sentences.

The model is the paper's IWSLT14 shape (6-6 layers, d=512, FFN 1024, 4 heads, 10k vocabulary) with normlab's
**Post-LN** placement, ported into a ``MarianMTModel``: Marian is Post-LN (LayerNorm after each residual add),
has no embedding LayerNorm and no final LayerNorm, scales embeddings by sqrt(d), uses sinusoidal positions
(its table is overwritten with normlab's fairseq-style table) and ties the output projection to the decoder
embedding, i.e. it is normlab's ``placement=post, share_embeddings=decoder`` layer for layer. The port is
checked first: teacher-forced logits of both models must agree (fp32).

The weights are random, so the model's own EOS decisions mean nothing; both decoders are therefore forced to
the *same output length per sentence* (EOS forbidden before the sentence's target length, the only choice
at it; PAD never), drawn like IWSLT14 De-En lengths. With equal weights and equal forcing both searches
must return the same translations (checked in fp32); the rest of the comparison is speed.

Source sentences: synthetic. Random token ids with lengths drawn from a log-normal (median 20, mean ~23 BPE
tokens, clipped to [2, 150]), the shape of IWSLT14 De-En's test set under a 10k joint BPE; target lengths
are the source length times a log-normal ratio (sigma 0.2, median 0.95). Sentences are sorted by source
length and cut into batches of ``--batch-size`` sentences, the same batches for both systems (fairseq and
HF users both batch by length). Beam 5, length penalty 1.2 (the paper's setting).

Where each gains: normlab runs step 0 once per sentence (then expands the beams), drops finished sentences
from the batch at once, and keeps its per-step work to a few tensor ops; HF keeps every sentence of a batch
until the batch is done and runs its general-purpose ``generate`` machinery each step.

    python benchmarks/decode_bench.py --quick          # ~1 minute: 60 sentences, bf16
    python benchmarks/decode_bench.py                  # 500 sentences, bf16 and fp32

Needs the ``bench`` extra (``pip install -e .[bench]``) for transformers.

Measured (2-core AVX2 CPU shared with other jobs, load ~7, 1 thread, fp32, torch 2.13, transformers 5.23):
500 sentences, 8 batches of 64: normlab 228 s / 181 s, HF 1549 s / 1189 s (two alternating runs each):
2.76 vs 0.42 sentences/s, 6.6x (median ratio 6.7x), 500/500 identical translations. ``--quick``: 5.5x,
40/40 identical. A profile of HF's decoding shows 63% of its time in cache copies (``index_select`` of the
self- and cross-attention caches after every step, ``cat``); normlab's share is ~8%. bf16 autocast is not
measured here: this CPU has no bf16 matmul instructions, where bf16 linear layers run 3-8x slower than fp32.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from normlab.config import ModelConfig  # noqa: E402
from normlab.data.batch import BOS, EOS, PAD  # noqa: E402
from normlab.generate import Seq2SeqState, beam_search, seq2seq_init, seq2seq_step_fn  # noqa: E402
from normlab.model import Seq2Seq  # noqa: E402

FIRST_WORD = 7  # ids below are special tokens


def iwslt_like(n: int, vocab: int, seed: int = 0) -> list[tuple[list[int], int]]:
    """``n`` (source tokens + EOS, target length) pairs with IWSLT14-like lengths (module docstring)."""
    g = torch.Generator().manual_seed(seed)
    src_len = torch.exp(torch.randn(n, generator=g) * 0.55 + math.log(20.0)).round().clamp(2, 150).long()
    ratio = torch.exp(torch.randn(n, generator=g) * 0.2 + math.log(0.95))
    tgt_len = (src_len * ratio).round().clamp(1, 200).long()
    out = []
    for s, t in zip(src_len.tolist(), tgt_len.tolist()):
        out.append((torch.randint(FIRST_WORD, vocab, (s,), generator=g).tolist() + [EOS], t))
    return out


def batches(data: list[tuple[list[int], int]], batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    data = sorted(data, key=lambda x: len(x[0]))
    out = []
    for i in range(0, len(data), batch_size):
        chunk = data[i : i + batch_size]
        S = max(len(s) for s, _ in chunk)
        src = torch.full((len(chunk), S), PAD, dtype=torch.long)
        for j, (s, _) in enumerate(chunk):
            src[j, : len(s)] = torch.tensor(s)
        out.append((src, torch.tensor([t for _, t in chunk])))
    return out


# --------------------------------------------------------------------------------------------------------
# normlab


@dataclasses.dataclass
class ForcedLength:
    """A cache wrapper that carries each row's forced output length through the search's reorders."""

    inner: Seq2SeqState
    target: torch.Tensor  # (rows,) long: tokens before the EOS for the row's sentence
    step: int = 0

    def reorder(self, index: torch.Tensor) -> ForcedLength:
        self.inner.reorder(index)
        self.target = self.target.index_select(0, index)
        return self


def normlab_decode(model: Seq2Seq, src: torch.Tensor, target: torch.Tensor, beam: int, lenpen: float) -> list:
    base = seq2seq_step_fn(model)

    def step(tokens, c: ForcedLength):
        lp, c.inner = base(tokens, c.inner)
        lp[:, EOS] = lp[:, EOS].masked_fill(c.target.gt(c.step), -math.inf)  # no EOS before the target length
        c.step += 1
        return lp, c

    state = ForcedLength(seq2seq_init(model, src), target.clone())
    # the search itself forces the EOS at max_len = 1.0 * target + 0
    hyps = beam_search(
        step, state, src.shape[0], beam_size=beam, lenpen=lenpen, nbest=1, src_lengths=target, max_len_a=1.0,
        max_len_b=0, max_len_cap=model.cfg.max_positions - 1,
    )  # fmt: skip
    return hyps.best()


# --------------------------------------------------------------------------------------------------------
# Hugging Face


def port_to_marian(model: Seq2Seq):
    """A ``MarianMTModel`` with normlab's Post-LN weights (see the module docstring for why Marian)."""
    from transformers import MarianConfig, MarianMTModel

    cfg = model.cfg
    if cfg.placement.value != "post" or cfg.share_embeddings != "decoder" or cfg.embedding_norm:
        raise ValueError("Marian matches placement=post, share_embeddings=decoder, embedding_norm=False")
    hc = MarianConfig(
        vocab_size=cfg.vocab_size, d_model=cfg.d_model, encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers, encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ffn, decoder_ffn_dim=cfg.d_ffn, activation_function=cfg.activation, dropout=0.0,
        attention_dropout=0.0, activation_dropout=0.0, max_position_embeddings=cfg.max_positions,
        scale_embedding=cfg.scale_embedding, pad_token_id=cfg.pad_id, eos_token_id=EOS, decoder_start_token_id=BOS,
        forced_eos_token_id=None, share_encoder_decoder_embeddings=False, tie_word_embeddings=True,
    )  # fmt: skip
    hf = MarianMTModel(hc)
    hc._attn_implementation = "sdpa"
    sd = model.state_dict()
    d = cfg.d_model
    out = {
        "model.encoder.embed_tokens.weight": sd["encoder.embed_tokens.weight"],
        "model.decoder.embed_tokens.weight": sd["decoder.embed_tokens.weight"],
        "lm_head.weight": sd["output_projection.weight"],
        "final_logits_bias": torch.zeros(1, cfg.vocab_size),
    }
    table = model.encoder.embed_positions.table
    for side in ("encoder", "decoder"):
        out[f"model.{side}.embed_positions.weight"] = table
        for i in range(getattr(cfg, f"{side}_layers")):
            a, b = f"{side}.layers.{i}", f"model.{side}.layers.{i}"
            qkv_w, qkv_b = sd[f"{a}.self_attn.qkv.weight"].split(d), sd[f"{a}.self_attn.qkv.bias"].split(d)
            for proj, w, bias in zip("qkv", qkv_w, qkv_b):
                out[f"{b}.self_attn.{proj}_proj.weight"], out[f"{b}.self_attn.{proj}_proj.bias"] = w, bias
            pairs = {
                "self_attn.out": "self_attn.out_proj", "self_attn.norm_add": "self_attn_layer_norm",
                "ffn.w1": "fc1", "ffn.w2": "fc2", "ffn.norm_add": "final_layer_norm",
            }  # fmt: skip
            if side == "decoder":
                pairs.update({"cross_attn.q": "encoder_attn.q_proj", "cross_attn.out": "encoder_attn.out_proj",
                              "cross_attn.norm_add": "encoder_attn_layer_norm"})  # fmt: skip
                k, v = sd[f"{a}.cross_attn.kv.weight"].split(d)
                kb, vb = sd[f"{a}.cross_attn.kv.bias"].split(d)
                out[f"{b}.encoder_attn.k_proj.weight"], out[f"{b}.encoder_attn.v_proj.weight"] = k, v
                out[f"{b}.encoder_attn.k_proj.bias"], out[f"{b}.encoder_attn.v_proj.bias"] = kb, vb
            for mine, theirs in pairs.items():
                out[f"{b}.{theirs}.weight"] = sd[f"{a}.{mine}.weight"]
                out[f"{b}.{theirs}.bias"] = sd[f"{a}.{mine}.bias"]
    missing, unexpected = hf.load_state_dict(out, strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"port incomplete: missing {missing}, unexpected {unexpected}")
    hf.lm_head.weight = hf.model.decoder.embed_tokens.weight
    return hf.eval()


def hf_decode(hf, src: torch.Tensor, target: torch.Tensor, beam: int, lenpen: float) -> list[list[int]]:
    from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList

    class ForceLength(LogitsProcessor):
        """The same forcing as normlab's: PAD never, EOS only at (and then exactly at) the target length."""

        def __init__(self, target: torch.Tensor) -> None:
            self.target = target.repeat_interleave(beam)  # rows are sentence-major in HF's beam search too

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            step = input_ids.shape[1] - 1  # generated so far (the first column is the decoder start token)
            scores[:, PAD] = -math.inf
            scores[:, EOS] = scores[:, EOS].masked_fill(self.target.gt(step), -math.inf)
            at = self.target.le(step)
            eos = scores[:, EOS].clone()
            scores.masked_fill_(at[:, None], -math.inf)
            scores[:, EOS] = eos
            return scores

    gc = GenerationConfig(
        num_beams=beam, length_penalty=lenpen, do_sample=False, max_new_tokens=int(target.max()) + 1,
        decoder_start_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, forced_eos_token_id=None, use_cache=True,
        num_return_sequences=1,
    )  # fmt: skip
    out = hf.generate(
        input_ids=src, attention_mask=src.ne(PAD), generation_config=gc,
        logits_processor=LogitsProcessorList([ForceLength(target)]),
    )  # fmt: skip
    hyps = []
    for row in out[:, 1:].tolist():
        hyps.append(row[: row.index(EOS)] if EOS in row else [t for t in row if t != PAD])
    return hyps


# --------------------------------------------------------------------------------------------------------


def check_logits(model: Seq2Seq, hf, data) -> float:
    """Max |logit difference| / max |logit| of teacher-forced passes (padded sources, fp32)."""
    src, target = batches(data[:8], 8)[0]
    g = torch.Generator().manual_seed(1)
    words = torch.randint(FIRST_WORD, model.cfg.vocab_size, (8, 11), generator=g)
    tgt_in = torch.cat([torch.full((8, 1), BOS), words], 1)
    with torch.inference_mode():
        ours = model(src, tgt_in)
        theirs = hf(input_ids=src, attention_mask=src.ne(PAD), decoder_input_ids=tgt_in).logits
    return float((ours - theirs).abs().max() / ours.abs().max())


def run(system: str, fn, model, bts, beam, lenpen, bf16) -> tuple[float, list[list[int]]]:
    hyps = []
    ctx = torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else torch.autocast("cpu", enabled=False)
    t0 = time.perf_counter()
    with torch.inference_mode(), ctx:
        for src, target in bts:
            hyps += fn(model, src, target, beam, lenpen)
    return time.perf_counter() - t0, hyps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="40 sentences, fp32 only, one run each (~1 minute)")
    p.add_argument("--sentences", type=int, default=500)
    p.add_argument("--batch-size", type=int, default=64, help="sentences per batch (sorted by source length)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--lenpen", type=float, default=1.2)
    p.add_argument(
        "--dtype", choices=["fp32", "bf16", "both"], default="fp32",
        help="bf16 = autocast for both systems (only worth it where the CPU has bf16 matmuls: AVX512-BF16/AMX)",
    )  # fmt: skip
    p.add_argument("--repeats", type=int, default=2, help="timed runs per system, alternating")
    p.add_argument(
        "--threads", type=int, default=1,
        help="torch threads for both systems; 1 because on a shared machine OpenMP threads that wait for each "
        "other make timings meaningless (measured: 2 threads 6x slower than 1 under load)",
    )  # fmt: skip
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    if args.quick:
        args.sentences, args.dtype, args.repeats = 40, "fp32", 1
    torch.set_num_threads(args.threads)
    try:
        import transformers
    except ImportError:
        print("decode_bench needs transformers: pip install -e '.[bench]'", file=sys.stderr)
        return 2

    torch.manual_seed(0)
    cfg = ModelConfig(placement="post", dropout=0.0)  # 6-6, d=512, FFN 1024, 4 heads, vocab 10k
    model = Seq2Seq(cfg).eval()
    hf = port_to_marian(model)
    data = iwslt_like(args.sentences, cfg.vocab_size)
    rel = check_logits(model, hf, data)
    print(f"port check: max |logit diff| / max |logit| = {rel:.2e} (fp32, teacher-forced, padded sources)")
    if rel > 1e-4:
        print("the ported model disagrees with normlab's; not timing", file=sys.stderr)
        return 1
    bts = batches(data, args.batch_size)
    n_src = sum(len(s) for s, _ in data)
    n_tgt = sum(t for _, t in data)
    print(
        f"{args.sentences} sentences in {len(bts)} batches of <= {args.batch_size}; source {n_src / len(data):.1f} "
        f"tokens/sentence (max {max(len(s) for s, _ in data)}), forced output {n_tgt / len(data):.1f} + EOS; "
        f"beam {args.beam}, lenpen {args.lenpen}; torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    results = {}
    for dtype in (["bf16", "fp32"] if args.dtype == "both" else [args.dtype]):
        bf16 = dtype == "bf16"
        times = {"normlab": [], "hf": []}
        outs = {}
        for r in range(args.repeats):
            for system, fn, m in (("normlab", normlab_decode, model), ("hf", hf_decode, hf)):
                dt, hyps = run(system, fn, m, bts, args.beam, args.lenpen, bf16)
                times[system].append(dt)
                outs[system] = hyps
                rate = args.sentences / dt
                print(f"  [{dtype}] {system:7s} run {r + 1}: {dt:7.2f} s  {rate:7.2f} sentences/s", flush=True)
        same = sum(a == b for a, b in zip(outs["normlab"], outs["hf"]))
        best = {k: min(v) for k, v in times.items()}
        med = {k: statistics.median(v) for k, v in times.items()}
        results[dtype] = dict(
            normlab_sentences_per_s=args.sentences / best["normlab"], hf_sentences_per_s=args.sentences / best["hf"],
            speedup_best=best["hf"] / best["normlab"], speedup_median=med["hf"] / med["normlab"],
            identical_outputs=same, times=times,
        )  # fmt: skip
        print(
            f"[{dtype}] normlab {args.sentences / best['normlab']:.2f} sentences/s, HF generate "
            f"{args.sentences / best['hf']:.2f} sentences/s: normlab is {best['hf'] / best['normlab']:.2f}x faster "
            f"(best of {args.repeats}; median ratio {med['hf'] / med['normlab']:.2f}x); identical translations "
            f"{same}/{args.sentences}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(dict(args=vars(args), logit_rel_diff=rel, results=results), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
