"""Strict configs: misspelt keys name the nearest valid key; invalid values name the field."""

import pytest

from normlab.config import ConfigError, DataConfig, ModelConfig, Placement, apply_overrides, load_yaml, parse_override


@pytest.mark.parametrize(
    "make",
    [
        lambda: ModelConfig.from_dict({"d_modle": 64}),
        lambda: ModelConfig(d_modle=64),
        lambda: ModelConfig().replace(d_modle=64),
    ],
)
def test_misspelt_key_names_key_and_nearest(make):
    with pytest.raises(ConfigError, match=r"unknown key 'd_modle'; did you mean 'd_model'\?"):
        make()


def test_unknown_key_without_close_match_still_named():
    with pytest.raises(ConfigError, match="unknown key 'zzz'"):
        ModelConfig.from_dict({"zzz": 1})


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"d_model": 0}, "d_model"),
        ({"n_heads": 3}, "n_heads"),
        ({"dropout": 1.0}, "dropout"),
        ({"attention_dropout": -0.1}, "attention_dropout"),
        ({"placement": "middle"}, "placement"),
        ({"positional": "rotary"}, "positional"),
        ({"d_model": "512"}, "d_model"),
        ({"scale_embedding": 1}, "scale_embedding"),
        ({"encoder_layers": -1}, "encoder_layers"),
        ({"pad_id": 10, "vocab_size": 10}, "pad_id"),
        ({"init": "theory"}, "init"),  # theory is single-head
        ({"share_embeddings": "some"}, "share_embeddings"),
    ],
)
def test_invalid_values_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=rf"ModelConfig\.{field}:"):
        ModelConfig(**overrides)


def test_frozen():
    cfg = ModelConfig()
    with pytest.raises(AttributeError):
        cfg.d_model = 3  # type: ignore[misc]


def test_round_trip_and_enum():
    cfg = ModelConfig(placement="peri", d_model=64, n_heads=2, dropout=0)
    assert cfg.placement is Placement.PERI
    assert isinstance(cfg.dropout, float)
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.to_dict()["placement"] == "peri"


def test_theory_init_single_head_accepted():
    assert ModelConfig(init="theory", n_heads=1).init == "theory"


def test_yaml_reads_scientific_notation_as_float():
    assert load_yaml("lr: 1e-3\nb: 5E-4\nn: 3\nname: pre") == {"lr": 1e-3, "b": 5e-4, "n": 3, "name": "pre"}


def test_overrides():
    assert parse_override("optim.lr=1e-3") == (["optim", "lr"], 1e-3)
    data = apply_overrides({"model": {"d_model": 8}}, ["model.placement=pre", "seed=3", "model.d_model=16"])
    assert data == {"model": {"d_model": 16, "placement": "pre"}, "seed": 3}
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_override("model.placement")


def test_field_help_documents_every_field():
    helps = ModelConfig.field_help()
    assert set(helps) == set(ModelConfig.field_names())
    assert all(helps.values())


def test_test_checkpoint_is_checked_before_training():
    from normlab.config import ConfigError, DataConfig, TrainConfig

    assert TrainConfig(test_checkpoint="avg:2").test_checkpoint == "avg:2"  # keep_last 2 by default
    for value, match in (("avg:3", r"needs 2 <= N <= keep_last=2 \(--set keep_last=3\)"), ("avg:1", "2 <= N"),
                         ("newest", "best, last, an update number or avg:N")):  # fmt: skip
        with pytest.raises(ConfigError, match=match):
            TrainConfig(test_checkpoint=value)
    with pytest.raises(ConfigError, match="test BLEU is for translation, not lm"):
        TrainConfig(test_checkpoint="best", data=DataConfig(task="lm"))


def test_an_unquoted_yaml_boolean_where_a_string_belongs_says_to_quote_it():
    """`--set 'data.labels=[no,yes]'`: YAML reads no and yes as booleans (a new user's finding: "expected a string,
    got False" did not say why)."""
    with pytest.raises(ConfigError, match=r"got False \(YAML reads an unquoted no, yes, .* quote it"):
        DataConfig.from_dict({"labels": [False, True]})
    with pytest.raises(ConfigError, match=r"expected a string, got 3$"):  # no hint where it would not help
        DataConfig.from_dict({"labels": [3, 4]})


def test_a_list_setting_given_as_plain_text_names_the_yaml_list():
    """--set data.labels=a,b (a new user's try) is a string, not a list: the error shows the YAML list it meant."""
    with pytest.raises(ConfigError, match=r"expected a list, got 'different,same' \(a YAML list: '\[different, same\]'"):
        DataConfig.from_dict(apply_overrides({}, ["labels=different,same"]))
    with pytest.raises(ConfigError, match=r"expected a list, got 'same' \(a YAML list, e\.g\. '\[a, b\]'"):
        DataConfig.from_dict(apply_overrides({}, ["labels=same"]))
    assert DataConfig.from_dict(apply_overrides({}, ["labels=[different, same]"])).labels == ("different", "same")
