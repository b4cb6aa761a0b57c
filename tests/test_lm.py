"""The decoder-only language model (issue 34): ``data.task=lm``, :class:`~normlab.model.CausalLM`, RoPE, packed
next-token blocks, sampling with the KV cache, the GPT-2 export, and the commands that accept the task.

Tiers (STYLE.md 9): tiny models for every scheme; parity with references (RoPE against the paper's complex form,
GPT-2 in transformers); one-step CLI runs in a temp dir; a golden per-update loss curve of a seeded LM run."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from normlab.config import ConfigError, DataConfig, Placement, TrainConfig
from normlab.data.batch import EOS, PAD, LMBatch
from normlab.data.datasets import LMDataset
from normlab.data.tasks import lm_block_starts, lm_stream
from normlab.generate import next_token, sample_lm
from normlab.model import NORM_SLOTS, CausalLM, Rotary, build_model, describe, profile_init, project_weights_
from normlab.train.losses import lm_loss
from normlab.train.memory import parameters
from normlab.train.objectives import compute_loss
from tests.clirun import normlab, sets
from tests.conftest import SMALL_VOCAB, require_reference, tiny_config

SCHEMES = [p.value for p in Placement]
V = 50


def lm_config(**overrides):
    base = dict(positional="rope", scale_embedding=False, activation="gelu", mixln_alpha=0.5)
    base.update(overrides)
    return tiny_config(**base)


def tokens(B=3, T=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(7, V, (B, T), generator=g)


def _open_rezero(model):
    """ReZero's gates are 0 at init (every layer the identity): open them, so that a test sees the layers."""
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "gain") and hasattr(m.gain, "alpha"):
                m.gain.alpha.fill_(0.5)


# ---- every scheme builds, is causal, trains and decodes incrementally ------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_forward_backward(scheme):
    """Every placement of NORM_SLOTS builds as a decoder-only LM with QK-norm; forward and backward are finite and
    every parameter gets a gradient (ReZero: once its gates are open); the final norm is the scheme's."""
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement=scheme, qk_norm=scheme not in ("rezero", "ngpt")))
    x = tokens()
    profile_init(model, LMBatch(tokens=x, targets=x, n_tokens=x.numel()))  # Admin's omega; no-op otherwise
    _open_rezero(model)
    logits = model(x)
    assert logits.shape == (3, 10, V) and torch.isfinite(logits).all()
    F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.output_projection.weight is model.decoder.embed_tokens.weight  # tied (GPT-2)
    has_final = not isinstance(model.decoder.final_norm, torch.nn.Identity)
    assert has_final == NORM_SLOTS[Placement(scheme)].final, scheme
    assert model.decoder.role == "decoder"  # DeepNorm's and Sub-LN's decoder-only constants


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "dyt", "none"])
@pytest.mark.parametrize("positional", ["rope", "learned", "sinusoidal"])
def test_every_norm_and_position_is_causal(norm, positional):
    """Changing token t changes no logit before t (the mask), and does change logit t."""
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement="peri", norm=norm, qk_norm=norm != "none", positional=positional)).eval()
    x = tokens(B=2, T=9)
    y = x.clone()
    y[:, 5] = (y[:, 5] + 1 - 7) % (V - 7) + 7
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :5], b[:, :5])
    assert (a[:, 5] - b[:, 5]).abs().max() > 1e-4


@pytest.mark.parametrize("scheme", SCHEMES)
def test_cached_decoding_equals_uncached(scheme):
    """The KV cache (prompt once, then one position per call) gives the logits of the full pass, every scheme."""
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement=scheme, qk_norm=scheme not in ("rezero", "ngpt"))).eval()
    x = tokens(B=2, T=11)
    profile_init(model, (x,))
    _open_rezero(model)
    with torch.no_grad():
        full = model(x)
        cache = model.init_cache()
        steps = [model(x[:, :4], cache=cache)] + [model(x[:, t : t + 1], cache=cache) for t in range(4, 11)]
    assert cache.length == 11
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_cached_decoding_equals_uncached_absolute_positions(positional):
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement="pre", positional=positional, scale_embedding=True)).eval()
    x = tokens(B=2, T=8)
    with torch.no_grad():
        full = model(x)
        cache = model.init_cache()
        steps = [model(x[:, t : t + 1], cache=cache) for t in range(8)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_every_scheme_learns_a_pattern():
    """A periodic sequence is learnt by Post-LN, Pre-LN and the LLM schemes in a few Adam steps (next-token loss
    falls below half its start)."""
    x = torch.tensor([[7 + (i * 3) % 11 for i in range(17)]] * 4)
    for scheme in ("post", "pre", "peri", "mixln", "lns", "output", "deepnorm", "hybridnorm", "ngpt"):
        torch.manual_seed(0)
        model = CausalLM(lm_config(placement=scheme))
        # nGPT's logits are cosines times s_z (1 at init, |z| <= 1): in 30 steps it needs a larger step for s_z and the
        # unit-norm matrices to move (at 3e-3 its loss falls from 3.88 to 2.39, at 1e-2 to 1.20)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2 if scheme == "ngpt" else 3e-3)
        losses = []
        for _ in range(30):
            loss = F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            project_weights_(model)  # nGPT's matrices back on the sphere, as the trainer does; a no-op otherwise
            losses.append(loss.item())
        assert losses[-1] < 0.5 * losses[0], (scheme, losses[0], losses[-1])


def test_describe_and_build_model():
    model = build_model(lm_config(placement="mixln", decoder_layers=4), "lm")
    assert isinstance(model, CausalLM)
    text = describe(model)
    assert text.startswith("CausalLM: placement=mixln") and "decoder layers 1-2" in text


def test_memory_floor_counts_the_decoder_only_stack():
    cfg = lm_config(encoder_layers=0, decoder_layers=3)
    built = sum(p.numel() for p in CausalLM(cfg).parameters())
    assert parameters(cfg, "lm") <= built < 1.2 * parameters(cfg, "lm")


# ---- RoPE -------------------------------------------------------------------------------------------------


def test_rope_equals_the_papers_complex_rotation():
    """Su et al. 2021, Eq. 34 in complex form: feature pair i as z = x_i + j x_{i + hd/2} is multiplied by
    exp(j p theta_i), theta_i = 10000^(-2i/hd)."""
    hd, T = 8, 6
    x = torch.randn(2, 3, T, hd, dtype=torch.float64)
    rot = Rotary(hd, 32)
    got = rot(x.float(), start=5).double()
    theta = 10000.0 ** (-torch.arange(hd // 2, dtype=torch.float64) * 2 / hd)
    p = torch.arange(5, 5 + T, dtype=torch.float64)[:, None]
    z = torch.complex(x[..., : hd // 2], x[..., hd // 2 :]) * torch.exp(1j * p * theta)
    torch.testing.assert_close(got, torch.cat([z.real, z.imag], -1), atol=1e-5, rtol=1e-5)


def test_rope_scores_depend_on_relative_position_only():
    rot = Rotary(8, 64)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    s = [float((rot(q, a) * rot(k, b)).sum()) for a, b in ((3, 1), (10, 8), (40, 38))]
    assert s[0] == pytest.approx(s[1], abs=1e-4) and s[0] == pytest.approx(s[2], abs=1e-4)


def test_rope_config_checks():
    with pytest.raises(ConfigError, match="even head size"):
        tiny_config(d_model=12, n_heads=4, positional="rope")
    model = CausalLM(lm_config())
    assert model.decoder.embed_positions is None and model.decoder.layers[0].self_attn.rotary is not None
    assert not any("rotary" in k for k in model.state_dict())  # a table, not a parameter: checkpoints hold none


# ---- softmax capping --------------------------------------------------------------------------------------


def test_softcap_attention_formula():
    """softmax(c tanh(q k^T / sqrt(hd) / c) + causal mask) v, against a float64 reference; a large cap is no cap,
    and the capped logits stay within [-c, c] however large q and k grow."""
    from normlab.model import _sdpa

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 8, generator=g, dtype=torch.float64) * 4 for _ in range(3))
    c = 2.0
    s = c * torch.tanh(q @ k.transpose(-2, -1) / math.sqrt(8) / c)
    s = s.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), -math.inf)
    want = torch.softmax(s, -1) @ v
    for impl in ("sdpa", "matmul"):  # a cap makes every kernel take the explicit products
        torch.testing.assert_close(_sdpa(q, k, v, None, True, 0.0, impl, softcap=c), want)
    torch.testing.assert_close(_sdpa(q, k, v, None, True, 0.0, "matmul", softcap=1e6), _sdpa(q, k, v, None, True, 0.0, "sdpa"))
    assert float(s[torch.isfinite(s)].abs().max()) <= c


def test_softcap_lm_decodes_incrementally_and_trains():
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement="pre", qk_norm=True, attention_softcap=5.0)).eval()
    assert all(m.softcap == 5.0 for m in model.modules() if hasattr(m, "softcap"))
    x = tokens(B=2, T=9)
    with torch.no_grad():
        full = model(x)
        cache = model.init_cache()
        steps = [model(x[:, t : t + 1], cache=cache) for t in range(9)]
        uncapped = CausalLM(lm_config(placement="pre", qk_norm=True)).eval()
        uncapped.load_state_dict(model.state_dict())
        assert (uncapped(x) - full).abs().max() > 1e-6  # the cap is applied
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    with pytest.raises(ConfigError, match="attention_softcap"):
        tiny_config(attention_softcap=-1.0)


# ---- data: packed blocks ----------------------------------------------------------------------------------


def test_lm_stream_and_blocks():
    paragraphs = np.array([10, 11, 12, 20, 21], dtype=np.uint16)
    stream = lm_stream(paragraphs, np.array([0, 3, 5]))
    assert stream.tolist() == [EOS, 10, 11, 12, EOS, 20, 21, EOS]
    ds = LMDataset(stream, lm_block_starts(len(stream), 3), 3)
    assert ds.sizes.tolist() == [3, 3, 1]
    # every stream token after the first is a target exactly once, and targets are the inputs shifted by one
    assert sorted(ds.all_targets().tolist()) == sorted(stream[1:].tolist())
    b = ds.collate(np.array([2, 0]))
    assert b.tokens.tolist() == [[21, PAD, PAD], [EOS, 10, 11]]
    assert b.targets.tolist() == [[EOS, PAD, PAD], [10, 11, 12]]
    assert b.n_tokens == 4
    assert ds.select(np.array([1])).block(0).tolist() == [12, EOS, 20]


def test_lm_data_config():
    assert DataConfig(task="lm").corpus_name == "en-mono"
    DataConfig(task="lm", corpus="en-mono")  # the vendored masked-LM text serves the causal LM
    with pytest.raises(ConfigError, match="translation corpus; task 'lm' uses \\['en-mono'\\]"):
        DataConfig(task="lm", corpus="de-en")


@pytest.fixture(scope="module")
def small_lm(small_corpora, data_cache):
    from normlab.data import prepare
    from tests.conftest import small_data_config

    return prepare(small_data_config(small_corpora["mono"], data_cache, task="lm", block_size=64), max_positions=64)


def test_prepare_lm_shares_the_masked_lms_tokenizer(small_lm, small_mlm):
    """The two text tasks read the same text: one tokenizer and one binarized split (the cache key) serve both."""
    assert small_lm.tokenizer.proto == small_mlm.tokenizer.proto
    assert small_lm.stats["train"]["cache"] == small_mlm.stats["train"]["cache"]
    train = small_lm.splits["train"]
    assert isinstance(train, LMDataset) and train.sizes.max() == 64
    # the whole split is scored: as many targets as stream tokens but the first
    assert len(train.all_targets()) == len(train.stream) - 1
    batch = train.collate(train.epoch_batches(1, 1, 512)[0])
    assert batch.tokens.shape[1] == 64 and batch.n_tokens == int(batch.targets.ne(PAD).sum())


# ---- loss -------------------------------------------------------------------------------------------------


def test_loss_impls_agree():
    """The chunked head (no (N, V) logits) gives the plain cross-entropy's value and gradients."""
    torch.manual_seed(0)
    cfg = lm_config(placement="pre")
    x = tokens(B=2, T=9)
    targets = x.roll(-1, 1)
    targets[1, -3:] = PAD  # a padded block
    grads = {}
    for impl in ("plain", "chunked", "recompute"):
        torch.manual_seed(0)
        model = CausalLM(cfg)
        loss, nll = lm_loss(model, x, targets, impl=impl, chunk_size=5)
        loss.backward()
        torch.testing.assert_close(loss, nll)
        grads[impl] = (loss.detach(), [p.grad.clone() for p in model.parameters()])
        want = F.cross_entropy(model(x).flatten(0, 1), targets.flatten(), ignore_index=PAD, reduction="sum")
        torch.testing.assert_close(loss.detach(), want.detach())
    for impl in ("chunked", "recompute"):
        torch.testing.assert_close(grads[impl][0], grads["plain"][0])
        for a, b in zip(grads[impl][1], grads["plain"][1]):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    model = CausalLM(cfg)
    sums = compute_loss(model, LMBatch(tokens=x, targets=targets, n_tokens=int(targets.ne(PAD).sum())), 0.1)
    assert sums.n_tokens == 15 and float(sums.loss.detach()) == pytest.approx(float(sums.nll))  # no label smoothing


# ---- sampling ---------------------------------------------------------------------------------------------


def _greedy_uncached(model, prompt, n):
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([seq]))[0, -1].clone()
            logits[PAD] = -math.inf
            seq.append(int(logits.argmax()))
    return seq[len(prompt) :]


@pytest.mark.parametrize("positional", ["rope", "learned"])
def test_greedy_sampling_with_cache_equals_uncached_argmax(positional):
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement="pre", positional=positional)).eval()
    prompt = [EOS, 9, 17, 23]
    got = sample_lm(model, prompt, max_new_tokens=12, temperature=0.0, eos=-1)[0]  # eos=-1: never stop early
    assert got == _greedy_uncached(model, prompt, 12)
    assert sample_lm(model, prompt, max_new_tokens=12, top_k=1, eos=-1)[0] == got  # top-1 sampling is greedy


def test_sampling_is_seeded_stops_at_eos_and_respects_max_positions():
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement="pre", max_positions=16)).eval()
    a = sample_lm(model, [EOS, 9], samples=4, max_new_tokens=30, seed=3, eos=-1)
    assert a == sample_lm(model, [EOS, 9], samples=4, max_new_tokens=30, seed=3, eos=-1)
    assert a != sample_lm(model, [EOS, 9], samples=4, max_new_tokens=30, seed=4, eos=-1)
    assert all(len(row) == 14 for row in a)  # 16 positions - a prompt of 2

    class AlwaysEOS(torch.nn.Module):  # the model with EOS made certain: every sample ends before its first token
        def __init__(self, inner):
            super().__init__()
            self.inner, self.cfg = inner, inner.cfg

        def init_cache(self):
            return self.inner.init_cache()

        def forward(self, x, cache=None):
            out = self.inner(x, cache=cache).clone()
            out[..., EOS] = 1e4
            return out

    assert sample_lm(AlwaysEOS(model), [EOS, 9], samples=2, max_new_tokens=5) == [[], []]
    with pytest.raises(ValueError, match="no position"):
        sample_lm(model, list(range(7, 23)), max_new_tokens=1)


def test_top_k_draws_only_among_the_k_largest():
    logits = torch.tensor([[0.0, 5.0, 1.0, 4.0, 3.0, -1.0]]).expand(2000, -1)
    g = torch.Generator().manual_seed(0)
    drawn = next_token(logits, top_k=2, generator=g)
    assert set(drawn.tolist()) == {1, 3}
    # at temperature 1 the two keep their softmax odds, e^5 : e^4
    share = float(drawn.eq(1).float().mean())
    assert share == pytest.approx(math.e / (1 + math.e), abs=0.04)
    assert set(next_token(logits, generator=g).tolist()) <= {1, 2, 3, 4, 5}  # never PAD (id 0)
    assert next_token(logits, temperature=0.0).eq(1).all()


# ---- diagnose and sweep -------------------------------------------------------------------------------------


def test_diagnose_tells_post_from_pre_on_the_lm():
    """diagnose's calibration (12-layer encoder and encoder-decoder models) applied to 6-layer decoder-only LMs:
    Post-LN on the warm-up side of the 6-layer threshold, Pre-LN below it."""
    from normlab.analysis.diagnose import diagnose_config

    cfg = tiny_config(d_model=64, n_heads=4, d_ffn=128, decoder_layers=6, vocab_size=1000, max_positions=128)
    post = diagnose_config(cfg.replace(placement="post"), "lm", steps=2)
    pre = diagnose_config(cfg.replace(placement="pre"), "lm", steps=2)
    assert [p.stack for p in post.profiles] == ["decoder.layers"]
    assert post.warmup_advised is True and pre.warmup_advised is False, (post.score, pre.score)


def test_sweep_builds_lm_cells():
    from normlab.experiments.figures import Context
    from normlab.experiments.sweep import SweepConfig, _train_config, sweep_runs

    cfg = SweepConfig(task="lm", schemes=("post", "peri", "lns", "mixln", "output", "pre/dyt"), warmups=("none", "adam"),
                      widths=(32, 64), layers=2, updates=100, lr_min=1e-3, lr_max=1e-2, per_decade=1)  # fmt: skip
    assert cfg.warmup_length("adam") == 40  # 2 / (1 - 0.95)
    specs = sweep_runs(cfg, Context(translation_updates_per_epoch=1))
    assert len(specs) == 6 * 2 * 2 * 2 and {s.kind for s in specs} == {"lm"}
    tc = _train_config(cfg, Context(translation_updates_per_epoch=1), scheme="pre/dyt", warmup="adam", width=64,
                       lr=1e-3, seed=1)  # fmt: skip
    assert tc.data.task == "lm" and tc.model.decoder_layers == 2 and tc.model.norm == "dyt"
    assert tc.model.positional == "rope" and tc.optim.betas == (0.9, 0.95) and tc.label_smoothing == 0.0
    build_model(tc.model.replace(vocab_size=300), "lm")


def test_smoke_lm_sweep_cli(small_corpora, data_cache, tmp_path, monkeypatch):
    """`normlab sweep --set task=lm` end to end at the smoke preset on a small text corpus: every run trains, the
    plateau is the LM's unigram level, diagnose reads the decoder-only stack."""
    monkeypatch.setenv("NORMLAB_CACHE", str(data_cache))
    out = tmp_path / "sweep"
    proc = normlab("sweep", "--scale", "smoke", "--out", str(out), "--jobs", "2", "--threads", "1", "--corpus",
                   str(small_corpora["mono"]), "--set", "task=lm")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the probe times the LM's own update now (budget._updater on rows of its block size), with its edge-search line
    assert re.search(r"estimate: 24 runs, \d+ updates \(d=16: [\d.]+ s/update; d=32: [\d.]+ s/update\)", proc.stderr)
    assert "edge search, not in that estimate: 8 curves" in proc.stderr
    data = json.loads((out / "report" / "sweep.json").read_text())
    assert data["config"]["task"] == "lm" and data["meta"]["outcomes"]["failed"] == 0
    assert all(c["l0"] is not None for c in data["cells"])
    table = data["diagnose"]["table"]  # diagnose measured every scheme x width of the LM (S defined at init)
    assert len(table) == 4 and all(r["score"] is not None and math.isfinite(r["score"]) for r in table)
    cfg = yaml.safe_load((out / "runs" / data["cells"][0]["name"] / "config.yaml").read_text())
    assert cfg["data"]["task"] == "lm" and cfg["model"]["positional"] == "rope"


def test_unigram_baseline_of_lm_data(small_lm):
    from normlab.experiments.sweep import unigram_baseline
    from normlab.metrics import unigram_entropy

    u = unigram_baseline(small_lm, "lm")
    assert "unigram_loss_all_masked" not in u  # not the masked LM's copy-aware level
    want = unigram_entropy(small_lm.splits["valid"].all_targets(), small_lm.splits["train"].all_targets())
    assert u["unigram_loss"] == pytest.approx(want)


# ---- GPT-2 export: parity with transformers ---------------------------------------------------------------


def gpt2_like(**overrides):
    base = dict(placement="pre", positional="learned", scale_embedding=False, activation="gelu", decoder_layers=3)
    base.update(overrides)
    return tiny_config(**base)


@pytest.mark.parametrize("overrides", [{}, {"positional": "sinusoidal", "activation": "relu"}])
def test_gpt2_export_round_trips(overrides, tmp_path):
    """A Pre-LN CausalLM written by export_gpt2 and loaded by GPT2LMHeadModel.from_pretrained gives the same
    logits. Every parameter is moved off its initial value first, so that a swapped or dropped tensor shows."""
    tf = require_reference("transformers", "pip install 'normlab[hf]' (make install does)")
    from normlab.hf import export_gpt2

    torch.manual_seed(0)
    model = CausalLM(gpt2_like(**overrides)).eval()
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    export_gpt2(model, tmp_path)
    hf = tf.GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()  # tied after loading
    x = tokens(B=3, T=20)
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=x).logits, model(x), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("change, reason", [
    ({"placement": "post"}, "GPT-2 is Pre-LN"), ({"placement": "peri"}, "GPT-2 is Pre-LN"),
    ({"positional": "rope"}, "positional=rope"), ({"norm": "rmsnorm"}, "norm=rmsnorm"),
    ({"scale_embedding": True}, "scale_embedding=true"), ({"qk_norm": True}, "qk_norm=true"),
    ({"attention_softcap": 30.0}, "attention_softcap"),
])  # fmt: skip
def test_gpt2_export_refuses_what_gpt2_cannot_express(change, reason):
    from normlab.hf import gpt2_refusal, gpt2_state_dict

    cfg = gpt2_like(**change)
    assert reason in gpt2_refusal(cfg)
    with pytest.raises(ConfigError, match=reason.replace("(", "\\(")):
        gpt2_state_dict(CausalLM(cfg))
    assert gpt2_refusal(gpt2_like()) is None


# ---- the commands, end to end -----------------------------------------------------------------------------

# GPT-2-shaped (Pre-LN, learned positions, unscaled tied embeddings, GELU) so that export-hf can write it; RoPE
# runs through Trainer.fit in the golden test
TINY_LM = ["model.d_model=32", "model.n_heads=2", "model.d_ffn=64", "model.decoder_layers=2", "model.placement=pre",
           "model.max_positions=64", "model.positional=learned", "model.scale_embedding=false",
           "model.activation=gelu"]  # fmt: skip


def test_train_evaluate_generate_cli(small_corpora, small_lm, data_cache, tmp_path):
    out = tmp_path / "run"
    proc = normlab("train", "--out", str(out), "--quiet",
                   *sets("data.task=lm", f"data.corpus={small_corpora['mono']}", f"data.cache_dir={data_cache}",
                         f"data.vocab_size={SMALL_VOCAB}", "data.block_size=64", "data.max_tokens=512",
                         "data.valid_subset=8", *TINY_LM, "max_updates=2", "precision=fp32"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["update"] == 2
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["type"] for r in recs] == ["train", "train", "valid"]
    valid = recs[-1]
    assert valid["ppl"] == pytest.approx(math.exp(valid["nll"]))
    # at initialisation the model is near uniform over the vocabulary: ln V, not the unigram level or below
    assert abs(recs[0]["nll"] - math.log(SMALL_VOCAB)) < 1.0

    # evaluate: the perplexity of the run's validation split (all of it), beside the unigram level
    proc = normlab("evaluate", "--run", str(out), "--split", "valid", "--device", "cpu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    ev = json.loads(proc.stdout)
    assert ev["split"] == "valid" and ev["ppl"] == pytest.approx(math.exp(ev["nll"]))
    assert ev["unigram_ppl"] < ev["ppl"]  # two updates are far from the unigram level
    assert Path(ev["written"]).is_file()
    text = tmp_path / "mine.txt"
    text.write_text("The cat sat on the mat.\n\nA second paragraph follows here.\n", encoding="utf-8")
    own = json.loads(normlab("evaluate", "--run", str(out), "--text", str(text), "--device", "cpu").stdout)
    assert own["text"] == str(text) and own["tokens"] > 5 and math.isfinite(own["ppl"])

    # generate: seeded samples, one per line, the same again with the same seed
    args = ["generate", "--run", str(out), "--prompt", "The history of", "--samples", "3", "--max-new-tokens", "8",
            "--top-k", "20", "--seed", "1", "--device", "cpu"]  # fmt: skip
    first = normlab(*args)
    assert first.returncode == 0, first.stderr[-2000:]
    assert len(first.stdout.splitlines()) == 3 and first.stdout == normlab(*args).stdout
    bad = normlab("generate", "--run", str(out), "--temperature", "-1")
    assert bad.returncode == 2 and "--temperature" in bad.stderr

    # export-hf: a Pre-LN language-model run goes out as GPT2LMHeadModel, checked against normlab's logits
    if importlib.util.find_spec("transformers") is not None:
        proc = normlab("export-hf", "--run", str(out), "--out", str(tmp_path / "hf"))
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "GPT2LMHeadModel" in proc.stdout and (tmp_path / "hf" / "tokenizer.model").is_file()
        assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]


def test_model_and_diagnose_cli(tmp_path):
    proc = normlab("model", "--task", "lm", *sets("model.placement=peri", "model.positional=rope",
                                                   "model.decoder_layers=3", "model.d_model=64"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("CausalLM: placement=peri")
    js = tmp_path / "d.json"
    proc = normlab("diagnose", "--task", "lm", "--steps", "1", "--json", str(js),
                   *sets("model.d_model=32", "model.n_heads=2", "model.d_ffn=64", "model.decoder_layers=3",
                         "model.vocab_size=300", "model.max_positions=64"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "lm model, placement=post, 3 decoder layers" in proc.stdout
    assert json.loads(js.read_text())["stacks"][0]["stack"] == "decoder.layers"


def test_train_lm_refuses_a_translation_corpus(tmp_path):
    proc = normlab("train", "--out", str(tmp_path / "r"), *sets("data.task=lm", "data.corpus=de-en"))
    assert proc.returncode == 2 and "task 'lm' uses ['en-mono']" in proc.stderr
    assert not (tmp_path / "r").exists()


# ---- golden ---------------------------------------------------------------------------------------------------

GOLDEN = Path(__file__).parent / "golden" / "lm_losses.json"


def _golden_losses(placement: str, run_dir: Path) -> list[float]:
    """30 updates of a seeded tiny LM (RoPE, dropout 0.1, warm-up, AdamW, the chunked loss) through Trainer.fit on
    a synthetic stream: a noisy periodic sequence, so no tokenizer enters the numbers (as test_golden_losses)."""
    from normlab.train.trainer import Trainer

    rng = np.random.default_rng(0)
    stream = np.array([7 + (i * 5) % 13 if rng.random() > 0.1 else rng.integers(7, 30) for i in range(4000)])
    data = LMDataset(stream, lm_block_starts(len(stream), 32), 32)
    cfg = TrainConfig.from_dict({
        "model": dict(d_model=32, n_heads=2, d_ffn=64, decoder_layers=2, vocab_size=30, dropout=0.1,
                      max_positions=32, placement=placement, positional="rope", scale_embedding=False,
                      activation="gelu"),
        "data": {"task": "lm", "max_tokens": 256, "block_size": 32},
        "optim": {"name": "adamw", "lr": 3e-3, "betas": [0.9, 0.95], "weight_decay": 0.1},
        "schedule": {"warmup_updates": 8, "decay": "constant"},
        "max_updates": 30, "max_epochs": 10, "device": "cpu", "precision": "fp32", "seed": 1, "attention": "sdpa",
    })  # fmt: skip
    summary = Trainer(cfg, run_dir, data, quiet=True).fit()
    assert summary["status"] == "completed" and summary["update"] == 30
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r["loss"] for r in map(json.loads, lines) if r["type"] == "train"]


def test_lm_losses_match_golden(tmp_path):
    """Per-update losses of a seeded LM run (Pre-LN and Peri-LN), so that a change that alters the LM's training
    shows at once; tolerance as tests/test_golden_losses.py (1e-5 relative: thread counts and CPUs). Regenerate
    with NORMLAB_UPDATE_GOLDEN=1 after a deliberate change, and say why in the commit."""
    losses = {p: _golden_losses(p, tmp_path / p) for p in ("pre", "peri")}
    for p, curve in losses.items():
        assert curve[-1] < 0.6 * curve[0], (p, curve[0], curve[-1])  # the pattern is being learnt
    if os.environ.get("NORMLAB_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(losses, indent=1) + "\n", encoding="utf-8")
        pytest.skip("golden file regenerated")
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    for p in ("pre", "peri"):
        torch.testing.assert_close(torch.tensor(losses[p], dtype=torch.float64),
                                   torch.tensor(golden[p], dtype=torch.float64), rtol=1e-5, atol=0.0)  # fmt: skip
