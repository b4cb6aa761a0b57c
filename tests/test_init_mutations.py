"""A mutation check of the init rules of DeepNorm, Sub-LN and B2T: each mutation below alters one constant or
one scaled weight of normlab.model (monkeypatched for the test only), and each test named beside it must then
fail. A rule whose mutation no test notices is a rule no test checks (issue 33: five such mistakes in
DeepNorm / Sub-LN initialisation passed the default suite while torchscale was not installed; make test now
installs it and requires it, NORMLAB_REQUIRE_REFS=1).

Each named test is also run unmutated first, so that its failure is the mutation's and not the test's own.
A mutation that changes nothing at initialisation (scaling the zero biases as well) cannot be caught by an
init test and is not listed.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

import normlab.model as M
from tests import test_parity_refs as refs
from tests import test_schemes as schemes


def _plan_with(change):
    """plan_layer, then ``change(cfg, role, plan) -> plan``."""
    original = M.plan_layer

    def plan_layer(cfg, role, index, n_layers):
        return change(cfg, role, original(cfg, role, index, n_layers))

    return plan_layer


def _deepnorm_constants(role_changed, alpha=1.0, beta=1.0, beta_fn=None):
    original = M.deepnorm_constants

    def constants(role, n_encoder, n_decoder):
        a, b = original(role, n_encoder, n_decoder)
        if role != role_changed:
            return a, b
        return a * alpha, (beta_fn(n_encoder, n_decoder) if beta_fn else b * beta)

    return constants


def _self_attn_qkv_all(self):  # W^Q and W^K scaled with W^V
    return [self.qkv.weight, self.qkv.bias, self.out.weight, self.out.bias]


def _cross_v_unscaled(self):  # the cross-attention's W^V (and its bias) left out
    return [self.out.weight, self.out.bias]


ORIGINAL_SUBLN = M.subln_gamma


def _subln_gamma_encoder_only_formula(role, n_encoder, n_decoder):
    if role == "seq2seq-encoder":  # the encoder-only sqrt(log 2N) where Sub-LN has sqrt(log(3M) log(2N) / 3)
        return math.sqrt(math.log(2 * n_encoder))
    return ORIGINAL_SUBLN(role, n_encoder, n_decoder)


def _b2t_decoder_takes_encoder_depth(cfg, role, plan):
    if plan.slots.init == "b2t" and role == "seq2seq-decoder":
        return dataclasses.replace(plan, init_gain=1 / math.sqrt(cfg.encoder_layers))
    return plan


def _b2t_cross_unscaled(self):
    return [] if self.plan.slots.init == "b2t" else self.init_gain_weights()


# mutation: ([(object, attribute, replacement)], [tests that must fail, as (module, function, args)])
MUTATIONS = {
    "deepnorm-seq2seq-encoder-beta-x1.32": (
        [(M, "deepnorm_constants", _deepnorm_constants("seq2seq-encoder", beta=1.32))],
        [(refs, "test_torchscale_init_constants", ("deepnorm", "seq2seq"))],
    ),
    "deepnorm-encoder-beta-x1.32": (
        [(M, "deepnorm_constants", _deepnorm_constants("encoder", beta=1.32))],
        [(refs, "test_torchscale_init_constants", ("deepnorm", "encoder")), (schemes, "test_deepnorm_lines", ())],
    ),
    "deepnorm-seq2seq-decoder-beta-from-8M": (
        [(M, "deepnorm_constants", _deepnorm_constants("seq2seq-decoder", beta_fn=lambda n, m: (8.0 * m) ** -0.25))],
        [(refs, "test_torchscale_init_constants", ("deepnorm", "seq2seq"))],
    ),
    "deepnorm-encoder-alpha-x1.1": (
        [(M, "deepnorm_constants", _deepnorm_constants("encoder", alpha=1.1))],
        [(refs, "test_torchscale_encoder_only", ("deepnorm",)),
         (refs, "test_torchscale_init_constants", ("deepnorm", "encoder")), (schemes, "test_deepnorm_lines", ())],
    ),
    "deepnorm-WQ-WK-scaled-too": (
        [(M.SelfAttention, "init_gain_weights", _self_attn_qkv_all)],
        [(refs, "test_torchscale_init_constants", ("deepnorm", "encoder")),
         (refs, "test_torchscale_init_constants", ("deepnorm", "seq2seq"))],
    ),
    "subln-WQ-WK-scaled-too": (
        [(M.SelfAttention, "init_gain_weights", _self_attn_qkv_all)],
        [(refs, "test_torchscale_init_constants", ("subln", "encoder")),
         (refs, "test_torchscale_init_constants", ("subln", "seq2seq"))],
    ),
    "subln-seq2seq-encoder-gamma-wrong": (
        [(M, "subln_gamma", _subln_gamma_encoder_only_formula)],
        [(refs, "test_torchscale_init_constants", ("subln", "seq2seq"))],
    ),
    "deepnorm-cross-attention-WV-unscaled": (
        [(M.CrossAttention, "init_gain_weights", _cross_v_unscaled)],
        [(refs, "test_torchscale_init_constants", ("deepnorm", "seq2seq"))],
    ),
    "subln-cross-attention-WV-unscaled": (
        [(M.CrossAttention, "init_gain_weights", _cross_v_unscaled)],
        [(refs, "test_torchscale_init_constants", ("subln", "seq2seq"))],
    ),
    "b2t-decoder-gain-from-encoder-depth": (
        [(M, "plan_layer", _plan_with(_b2t_decoder_takes_encoder_depth))],
        [(schemes, "test_b2t_lines", ())],
    ),
    "b2t-cross-attention-unscaled": (
        [(M.CrossAttention, "init_gain_params", _b2t_cross_unscaled)],
        [(schemes, "test_b2t_lines", ())],
    ),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_init_mutation_is_caught(mutation, monkeypatch):
    patches, catchers = MUTATIONS[mutation]
    for module, name, args in catchers:
        getattr(module, name)(*args)  # passes unmutated (skips, or fails under make test, without torchscale)
    for obj, attr, value in patches:
        monkeypatch.setattr(obj, attr, value)
    for module, name, args in catchers:
        with pytest.raises(AssertionError):
            getattr(module, name)(*args)
