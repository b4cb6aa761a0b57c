"""Strict, frozen configuration dataclasses.

Every config is a ``frozen=True, kw_only=True`` dataclass deriving from :class:`Strict`:

* unknown keys are an error that names the key and the nearest valid one (``from_dict``),
  never a silent default (HF's leftover kwargs are the anti-example);
* every field is type-checked and range-checked in ``__post_init__``; a bad value raises
  :class:`ConfigError` naming the field;
* each field's docstring (the ``help`` metadata) doubles as CLI help.

The model's fields follow fairseq's ``transformer_iwslt_de_en`` (the architecture of Xiong et al. 2020,
Appendix A.1: 6-6 layers, d=512, FFN 1024, 4 heads) unless said otherwise.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import re
import types
import typing
from typing import Any, ClassVar, Literal, Self

import yaml

__all__ = [
    "ConfigError", "Strict", "config", "field", "Placement", "NORMS", "ModelConfig", "OptimConfig", "ScheduleConfig",
    "DataConfig", "TrainConfig", "VENDORED_CORPORA", "DEFAULT_CORPUS", "TEXT_TASKS", "corpus_serves",
    "parse_override", "apply_overrides", "load_yaml", "Setting", "settings", "settings_help",
    "add_set_argument", "resolve_overrides", "flat_dict", "PLACEMENT_TASKS", "placement_task_error",
    "CHECKPOINT_AVERAGE",
]  # fmt: skip


class ConfigError(ValueError):
    """A configuration that normlab refuses: unknown key, wrong type or invalid value."""


def field(default: Any = dataclasses.MISSING, *, help: str, default_factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with a help string (shown by ``--help`` and in error messages)."""
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"help": help})


def _nearest(name: str, choices: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


class Strict:
    """Base of every normlab config: type checks, strict ``from_dict``, ``replace`` and ``to_dict``."""

    _checks: ClassVar[tuple] = ()

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            object.__setattr__(self, f.name, _coerce(type(self).__name__, f.name, hints[f.name], value))
        self.validate()

    def validate(self) -> None:
        """Cross-field and range checks; subclasses extend it and raise :class:`ConfigError`."""

    def error(self, name: str, message: str) -> ConfigError:
        return ConfigError(f"{type(self).__name__}.{name}: {message}")

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]

    @classmethod
    def field_help(cls) -> dict[str, str]:
        return {f.name: f.metadata.get("help", "") for f in dataclasses.fields(cls)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Self:
        """Build from a plain dict (YAML/JSON); nested Strict configs are built recursively."""
        data = dict(data or {})
        if not isinstance(data, dict):
            raise ConfigError(f"{cls.__name__}: expected a mapping, got {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        kwargs = {}
        for key, value in data.items():
            sub = _strict_class(hints.get(key))
            if sub is not None and isinstance(value, dict):
                value = sub.from_dict(value)
            kwargs[key] = value
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        """A JSON/YAML-ready dict (enums as their values) that ``from_dict`` turns back into ``self``."""
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, Strict):
                value = value.to_dict()
            elif isinstance(value, enum.Enum):
                value = value.value
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    def replace(self, **changes: Any) -> Self:
        """``dataclasses.replace`` with the strict checks of the constructor."""
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def flat_dict(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict (``to_dict``, a saved config.yaml) as dotted keys, ``{"model.d_model": 512, ...}``: the
    keys of ``--set``, and how a difference between two configurations is named."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flat_dict(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def config(cls: type) -> type:
    """Make ``cls`` a frozen, keyword-only dataclass whose constructor names a misspelt key and its nearest
    valid spelling (a plain dataclass only says "unexpected keyword argument")."""
    cls = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    generated = cls.__init__

    def __init__(self: Any, **kwargs: Any) -> None:
        names = [f.name for f in dataclasses.fields(cls)]
        for key in kwargs:
            if key not in names:
                raise ConfigError(f"{cls.__name__}: unknown key {key!r}{_nearest(key, names)}")
        generated(self, **kwargs)

    __init__.__doc__ = generated.__doc__
    cls.__init__ = __init__  # type: ignore[misc]
    return cls


def _strict_class(hint: Any) -> type[Strict] | None:
    if isinstance(hint, type) and issubclass(hint, Strict):
        return hint
    return None


def _coerce(owner: str, name: str, hint: Any, value: Any) -> Any:
    """Check ``value`` against the annotation ``hint``; widen int->float and str->Enum, nothing else."""
    where = f"{owner}.{name}"
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(owner, name, arg, value)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[-1] if errors else f"{where}: invalid value {value!r}")
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise ConfigError(f"{where}: {value!r} is not one of {list(choices)}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            # YAML's list syntax, which --set reads too (a new user tried "a,b")
            hint_text = (f" (a YAML list: '[{', '.join(v.strip() for v in value.split(','))}]', quoted for the shell)"
                         if isinstance(value, str) and "," in value else " (a YAML list, e.g. '[a, b]', quoted for the "
                         "shell)")  # fmt: skip
            raise ConfigError(f"{where}: expected a list, got {value!r}{hint_text}")
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(owner, name, args[0], v) for v in value)
        if len(args) != len(value):
            raise ConfigError(f"{where}: expected {len(args)} values, got {len(value)}")
        return tuple(_coerce(owner, name, a, v) for a, v in zip(args, value))
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        if isinstance(value, hint):
            return value
        try:
            return hint(value)
        except ValueError:
            raise ConfigError(f"{where}: {value!r} is not one of {[m.value for m in hint]}") from None
    if isinstance(hint, type) and issubclass(hint, Strict):
        if isinstance(value, hint):
            return value
        if isinstance(value, dict):
            return hint.from_dict(value)
        raise ConfigError(f"{where}: expected {hint.__name__}, got {type(value).__name__}")
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true/false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        if abs(value) > MAX_INT:
            raise ConfigError(f"{where}: {value} is out of range (at most {MAX_INT} in magnitude)")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        if not math.isfinite(value):  # no setting of normlab means anything at NaN or infinity
            raise ConfigError(f"{where}: must be a finite number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            hint_yaml = (" (YAML reads an unquoted no, yes, on, off, true or false as a boolean: quote it, e.g. "
                         "--set 'data.labels=[\"no\", \"yes\"]')") if isinstance(value, bool) else ""  # fmt: skip
            raise ConfigError(f"{where}: expected a string, got {value!r}{hint_yaml}")
        return value
    if hint is Any:
        return value
    raise TypeError(f"{where}: unsupported annotation {hint!r}")  # a bug in normlab, not in the user's config


# No integer setting means anything past 2**53 (a size, a count of updates, a seed); larger ones overflowed torch's
# int64 shape arithmetic in C++ frames (`--set model.d_model=10**30`, issue 36). Sizes that pass are checked
# against the machine's memory before allocation (normlab.train.memory).
MAX_INT = 2**53


class _Loader(yaml.SafeLoader):
    """YAML 1.1 reads ``1e-3`` as a string (it wants ``1.0e-3``); learning rates are written that way, so
    numbers in scientific notation without a dot are floats here."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _mapping_without_duplicates(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    """A YAML mapping; a key given twice is an error (PyYAML keeps the last silently: a typo'd config whose
    second ``lr:`` wins is a silent default, the anti-pattern of STYLE.md)."""
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            mark = key_node.start_mark
            raise ConfigError(f"line {mark.line + 1}: duplicate key {key!r} (first on line {seen[key] + 1})")
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` with ``1e-3`` read as a float; a syntax error or a duplicate key is a one-line
    :class:`ConfigError` that names the line."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(f"YAML syntax error: {where}{e.problem or e.context}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"YAML error: {' '.join(str(e).split())}") from None


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``a.b.c=value`` (the CLI's ``--set``); the value is read as YAML (``1e-3``, ``true``, ``[1, 2]``)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected key=value")
    key, raw = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError(f"--set {text!r}: empty key")
    return path, (load_yaml(raw) if raw.strip() else "")


def apply_overrides(data: dict[str, Any], overrides: typing.Iterable[str]) -> dict[str, Any]:
    """Apply ``--set`` overrides to a nested plain dict (validation happens when the config is built)."""
    out = _deepcopy_dict(data)
    for text in overrides:
        path, value = parse_override(text)
        node = out
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {text!r}: {part!r} is not a section")
            node = child
        node[path[-1]] = value
    return out


def _deepcopy_dict(d: dict[str, Any]) -> dict[str, Any]:
    return {k: _deepcopy_dict(v) if isinstance(v, dict) else v for k, v in d.items()}


# --------------------------------------------------------------------------------------------------------
# ``--set`` keys and ``--help``, both read off the dataclasses (fairseq's gen_parser_from_dataclass).
#
# One convention for every command: a key is the dotted path from the root of the file the command reads.
# ``normlab train`` reads a TrainConfig, so ``model.placement``; ``normlab model`` and ``normlab diagnose``
# read the ``model:`` section of that same file, so also ``model.placement``, and ``normlab data`` its
# ``data:`` section (``data.corpus``). The section's own key (``placement``, ``corpus``), the form these
# commands took before, is still accepted: no field of a section is named after the section, so it is never
# ambiguous. Anything else is one line that names the nearest valid key in the full form.


@dataclasses.dataclass(frozen=True)
class Setting:
    """One row of ``--help``: a dotted key, its type and default as ``--set`` reads them, and its help."""

    key: str
    type: str
    default: str
    help: str
    section: bool = False  # a nested config (its fields follow, ``key.field``)


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        name = " | ".join(_type_name(a) for a in args)
        return f"{name} | null" if len(args) < len(typing.get_args(hint)) else name
    if origin is Literal:
        return "|".join(str(a) for a in typing.get_args(hint))
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"[{_type_name(args[0])}, ...]"
        return "[" + ", ".join(_type_name(a) for a in args) + "]"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "|".join(str(m.value) for m in hint)
    if hint is Any:
        return "any"
    return getattr(hint, "__name__", str(hint))


def _value_text(value: Any) -> str:
    """A default as one would write it after ``--set key=`` (YAML)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    if value == "":
        return "''"
    return str(value)


def settings(cls: type[Strict], prefix: str = "") -> list[Setting]:
    """Every field of ``cls`` as a :class:`Setting`, nested configs expanded under their dotted keys."""
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = f"{prefix}{f.name}"
        sub = _strict_class(hints[f.name])
        if sub is not None:
            rows.append(Setting(key, sub.__name__, "", f.metadata.get("help", ""), section=True))
            rows.extend(settings(sub, prefix=f"{key}."))
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        rows.append(Setting(key, _type_name(hints[f.name]), _value_text(default), f.metadata.get("help", "")))
    return rows


def settings_help(cls: type[Strict], section: str = "", note: str = "") -> str:
    """The ``--set`` keys of a command whose config is ``cls`` (at ``section`` of the file it reads), for
    ``--help``: every field, its type, default and help; nested sections by their dotted keys."""
    import textwrap

    prefix = f"{section}." if section else ""
    head = f"settings (--set KEY=VALUE, the value read as YAML; {cls.__name__}"
    head += f", the `{section}:` section of a run config; the `{prefix}` may be left out)" if section else ")"
    lines = textwrap.wrap(head + (f"; {note}" if note else "") + ":", width=116, subsequent_indent="  ")
    for row in settings(cls, prefix):
        if row.section:
            lines += ["", f"  {row.key}.*: {row.help} ({row.type})"]
            continue
        lines.append(f"  {row.key} ({row.type}) = {row.default}")
        lines.extend(textwrap.wrap(row.help, width=116, initial_indent=" " * 6, subsequent_indent=" " * 6,
                                   break_on_hyphens=False, break_long_words=False))
    return "\n".join(lines)


def add_set_argument(p: Any, cls: type[Strict], section: str = "", note: str = "") -> None:
    """``--set KEY=VALUE`` on an argparse parser, with every key of ``cls`` listed in its ``--help``;
    ``normlab.cli.main`` rewrites the keys with :func:`resolve_overrides` before the command runs."""
    import argparse

    example = next(row for row in settings(cls, f"{section}." if section else "") if not row.section)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help=f"override a setting (repeatable), e.g. --set {example.key}={example.default}; every key "
                        "is listed below")  # fmt: skip
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = settings_help(cls, section, note)
    p.set_defaults(set_root=(cls, section))


def resolve_overrides(cls: type[Strict], section: str, overrides: typing.Iterable[str]) -> list[str]:
    """``--set`` items with their keys made relative to ``cls`` (what :func:`apply_overrides` applies to the
    section's dict): ``section.key`` and ``key`` are both accepted; an unknown key is a :class:`ConfigError`
    that names the nearest valid key as the command spells it (``section.key``)."""
    rows = settings(cls)
    keys = {row.key for row in rows}
    prefix = f"{section}." if section else ""
    out = []
    for text in overrides:
        path, _ = parse_override(text)
        raw = text.split("=", 1)[1]
        if section and path[0] == section and ".".join(path[1:]) in keys:
            path = path[1:]
        elif ".".join(path) not in keys:
            raise ConfigError(f"{cls.__name__}: unknown key {'.'.join(path)!r}{_nearest_key(path, rows, prefix)}")
        out.append(f"{'.'.join(path)}={raw}")
    return out


def _nearest_key(path: list[str], rows: list[Setting], prefix: str) -> str:
    """``; did you mean 'optim.lr'?``: the keys whose last part is the one given (``lr``, ``model.lr``), else
    the closest spelling of the whole key; each as the command spells it (with ``prefix``)."""
    given = ".".join(path)
    if prefix and given.startswith(prefix):
        given = given[len(prefix):]
    leaves = [row.key for row in rows if not row.section]
    near = [key for key in leaves if key.rsplit(".", 1)[-1] == path[-1]]
    if not near:
        near = difflib.get_close_matches(given, [row.key for row in rows], n=1, cutoff=0.5)
    if not near:
        return " (--help lists the keys)"
    return "; did you mean " + " or ".join(repr(prefix + key) for key in near) + "?"


# --------------------------------------------------------------------------------------------------------
# Model


class Placement(enum.StrEnum):
    """Where the norms sit and how the residual is wired (Xiong et al. 2020, Table 1 and Figure 1, and the
    schemes that followed). ``h`` is a sub-layer's input, ``F`` its branch (attention or FFN), ``N`` the norm
    function chosen by ``ModelConfig.norm``. The wiring of each is one row of ``normlab.model.NORM_SLOTS``,
    with its diagram and source there.

    * ``post``: N after each residual add (Vaswani et al. 2017, BERT): h <- N(h + F(h)).
    * ``pre``: N inside each branch, plus a final N (Table 1, right): h <- h + F(N(h)).
    * ``peri``: N on both sides of each branch, plus a final N (Kim et al. 2025, "Peri-LN"):
      h <- h + N(F(N(h))).
    * ``deepnorm``: Post-LN with an up-weighted residual, h <- N(alpha h + F(h)), and the value, output and
      FFN projections scaled by beta after Xavier (Wang et al. 2022, "DeepNet"): the paper's constants, which
      are torchscale 0.3.0's except in the encoder of an encoder-decoder, where normlab has the paper's
      beta = 0.87 (N^4 M)^(-1/16) (also Admin's code) and torchscale 1.15 (N^4 M)^(-1/16).
    * ``subln``: Pre-LN plus a norm before the attention output projection and before the second FFN
      projection, those projections scaled by gamma at init (Wang et al. 2022, "Magneto"; torchscale).
    * ``mixln``: Post-LN for the first floor(mixln_alpha * L) layers of a stack, Pre-LN after, final N for
      every mixln_alpha, 1 included, as the reference keeps it (Li et al. 2024, "Mix-LN").
    * ``lns``: Pre-LN with the branch norm's output scaled by 1/sqrt(l), l = 1..L (Sun et al. 2025,
      "The Curse of Depth", LayerNorm Scaling).
    * ``output``: N on the branch output only, plus a final N (OLMo 2, Team OLMo 2024): h <- h + N(F(h)).
    * ``rezero``: no norm; h <- h + a F(h) with a learned scalar a = 0 at init, one per layer shared by its
      sub-layers as in the reference code (Bachlechner et al. 2020).
    * ``admin``: Post-LN with a learned per-channel weight on the residual, h <- N(omega * h + F(h)), omega set
      by a profiling pass on a batch before the first update (Liu et al. 2020, "Admin"; ``admin_profile``).
    * ``b2t``: Post-LN plus, in each layer, the layer's input added before its last norm, bypassing the
      others, and every projection scaled by 1/sqrt(L) at init (Takase et al. 2023, "B2T connection").
    * ``resi_dual``: a Post-LN stream x_a and a second stream x_d that sums the branch outputs; the stack's
      output is x_a + N(x_d) (Xie et al. 2023, "ResiDual").
    * ``hybridnorm``: a norm on each head's queries, keys and values and one after the attention's residual add,
      a plain FFN residual, plus a final N (Zhuo et al. 2025, "HybridNorm": QKV-norm in the attention, Post-Norm in
      the FFN): h <- N(h + Attn_QKVnorm(h)); h <- h + FFN(h).
    * ``ngpt``: the normalized Transformer (Loshchilov et al. 2025, "nGPT"): hidden states and every matrix on the
      unit sphere, h <- Norm(h + alpha (Norm(F(h)) - h)) with learned per-channel alpha, queries and keys on the
      sphere, SwiGLU FFN, logits scaled by s_z, no LayerNorm (``norm`` does not apply); weights renormalised after
      each optimizer step. Decoder-only: task lm, with positional=rope and scale_embedding=false.
    """

    POST = "post"
    PRE = "pre"
    PERI = "peri"
    DEEPNORM = "deepnorm"
    SUBLN = "subln"
    MIXLN = "mixln"
    LNS = "lns"
    OUTPUT = "output"
    REZERO = "rezero"
    ADMIN = "admin"
    B2T = "b2t"
    RESI_DUAL = "resi_dual"
    HYBRIDNORM = "hybridnorm"
    NGPT = "ngpt"


# placements defined for some tasks only (the others: every task); TrainConfig and the sweep refuse the rest
PLACEMENT_TASKS: dict[Placement, tuple[str, ...]] = {Placement.NGPT: ("lm",)}


def placement_task_error(placement: Placement | str, task: str) -> str | None:
    """Why ``placement`` cannot train ``task`` (one line), or None."""
    tasks = PLACEMENT_TASKS.get(Placement(placement))
    if tasks is None or task in tasks:
        return None
    return (f"placement={Placement(placement).value} is defined for task {' or '.join(tasks)} only, not {task} "
            "(nGPT, Loshchilov et al. 2025: a decoder-only language model; no encoder, cross-attention or "
            "masked-LM head on the sphere)")


NORMS = ("layernorm", "rmsnorm", "dyt", "none")

CHECKPOINT_AVERAGE = re.compile(r"avg:(\d+)")
"""``avg:N``, a checkpoint setting (``--checkpoint``, ``test_checkpoint``): the mean of the last N checkpoints' weights
(normlab.rundir.RunDir.resolve_average)."""


def parse_scheme(text: str) -> tuple[str, str]:
    """A normalization scheme as ``normlab sweep`` and ``normlab analyze`` spell it: ``PLACEMENT`` or
    ``PLACEMENT/NORM`` (``pre/rmsnorm``) -> (placement, norm); the norm defaults to layernorm."""
    placement, _, norm = text.partition("/")
    return placement, norm or "layernorm"


def scheme_errors(schemes: typing.Sequence[str]) -> str | None:
    """Why a list of schemes (:func:`parse_scheme`) is not valid, or None: empty, an unknown placement or norm
    (naming the valid ones), or one scheme twice (``pre`` and ``pre/layernorm`` are the same)."""
    if not schemes:
        return "needs at least one scheme"
    placements = [p.value for p in Placement]
    for s in schemes:
        placement, norm = parse_scheme(s)
        if placement not in placements:
            return f"{s!r}: unknown placement {placement!r}; expected one of {placements}"
        if norm not in NORMS:
            return f"{s!r}: unknown norm {norm!r}; expected one of {list(NORMS)}"
    if len({parse_scheme(s) for s in schemes}) != len(schemes):
        return f"repeated: {list(schemes)}"
    return None


@config
class ModelConfig(Strict):
    """The Transformer: shapes, placement of the LayerNorms, embeddings and initialisation."""

    d_model: int = field(512, help="hidden size d (the paper's IWSLT setting: 512)")
    n_heads: int = field(4, help="attention heads (IWSLT: 4)")
    d_ffn: int = field(1024, help="FFN inner width (IWSLT: 1024)")
    encoder_layers: int = field(6, help="encoder depth L")
    decoder_layers: int = field(6, help="decoder depth: of the encoder-decoder, and of the decoder-only language model "
                                "(task lm); ignored by encoder-only models")
    vocab_size: int = field(10000, help="the embedding and output size: a training run sets it to its tokenizer's "
                            "size (set data.vocab_size to change that; the paper: 10k joint BPE)")
    pad_id: int = field(0, help="padding token id (embedding row kept at zero, ignored by attention)")
    dropout: float = field(0.1, help="dropout on embeddings and on every residual branch (paper: 0.1)")
    attention_dropout: float = field(0.0, help="dropout on attention probabilities")
    activation_dropout: float = field(0.0, help="dropout after the FFN activation")
    activation: Literal["relu", "gelu"] = field("relu", help="FFN activation (paper: ReLU; BERT: GELU)")
    placement: Placement = field(
        Placement.POST,
        help="where the norms sit and how the residual is wired: " + ", ".join(p.value for p in Placement)
        + " (normlab.config.Placement). Where sources differ: deepnorm's encoder of an encoder-decoder has the "
        "paper's beta 0.87 (N^4 M)^(-1/16), not torchscale's 1.15; rezero has one gate per layer, as the "
        "reference; mixln keeps its final norm at mixln_alpha = 1, as the reference",
    )
    norm: Literal["layernorm", "rmsnorm", "dyt", "none"] = field(
        "layernorm",
        help="the norm function of every slot the placement fills (and of embedding_norm and the masked LM's "
        "head): layernorm; "
        "rmsnorm (Zhang & Sennrich 2019); dyt, Dynamic Tanh gamma * tanh(a x) + beta with a learned scalar a "
        "(Zhu et al. 2025); none (every slot the identity)",
    )
    dyt_alpha: float = field(0.5, help="initial a of Dynamic Tanh (Zhu et al. 2025: 0.5 outside LLMs)")
    qk_norm: bool = field(
        False, help="a norm (the `norm` function) on each head's queries and keys before attention (Dehghani et al. 2023)"
    )
    attention_softcap: float = field(
        0.0, help="softmax capping: attention logits s = q k^T / sqrt(hd) become c tanh(s / c) before the softmax, "
        "bounding them in (-c, c) (the tanh soft-cap of Gemma 2, Gemma Team 2024; with QK-norm, Rybakov et al. 2024's "
        "third method); 0 = off. Computed by the matmul attention kernel (SDPA has no cap)",
    )
    mixln_alpha: float = field(
        0.25, help="Mix-LN: the share of each stack's layers, from the bottom, that are Post-LN (Li et al. 2024: "
        "0.25); the final norm stays at 1"
    )
    positional: Literal["sinusoidal", "learned", "rope"] = field(
        "sinusoidal", help="positions: fairseq's sinusoidal table or a learned one (BERT, GPT-2), added to the token "
        "embeddings; or rope, rotary embeddings of each head's queries and keys in self-attention (Su et al. 2021, "
        "RoFormer; the LLMs': Llama, OLMo), no table added to the input",
    )
    scale_embedding: bool = field(True, help="multiply token embeddings by sqrt(d) (fairseq/Vaswani)")
    embedding_norm: bool = field(False, help="LayerNorm on the summed input embeddings (BERT has one)")
    type_vocab_size: int = field(0, help="segment (token type) embeddings; 2 for BERT sentence pairs, 0 for none")
    share_embeddings: Literal["all", "decoder", "none"] = field(
        "decoder",
        help="tie embeddings: all = encoder input, decoder input and output projection; "
        "decoder = decoder input and output (fairseq's IWSLT recipe; the language model's too, as GPT-2); none",
    )
    max_positions: int = field(1024, help="longest sequence the position embedding covers")
    layer_norm_eps: float = field(1e-5, help="LayerNorm epsilon")
    num_classes: int = field(2, help="classes of the sentence-pair classification head")
    init: Literal["xavier", "theory", "bert"] = field(
        "xavier",
        help="xavier: Xavier-normal N(0, 2/(n_in+n_out)) for every projection, zero biases, gamma=1, beta=0 "
        "(Section 3.3); theory: the same with W^Q = W^K = 0 so attention is uniform, single head; bert: every "
        "projection and embedding N(0, 0.02^2) truncated at 2 standard deviations (Devlin et al.'s "
        "initializer_range, BERT's own code), zero biases, gamma=1, beta=0; opt-in (set it, and "
        "scale_embedding=false as BERT has, for a BERT-like model)",
    )

    def validate(self) -> None:
        for name in ("d_model", "n_heads", "d_ffn", "vocab_size", "max_positions", "num_classes"):
            if getattr(self, name) <= 0:
                raise self.error(name, f"must be positive, got {getattr(self, name)}")
        for name in ("encoder_layers", "decoder_layers", "type_vocab_size"):
            if getattr(self, name) < 0:
                raise self.error(name, f"must be >= 0, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise self.error("n_heads", f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            p = getattr(self, name)
            if not 0.0 <= p < 1.0:
                raise self.error(name, f"must be in [0, 1), got {p}")
        if not 0 <= self.pad_id < self.vocab_size:
            raise self.error("pad_id", f"must be in [0, vocab_size={self.vocab_size}), got {self.pad_id}")
        if self.layer_norm_eps <= 0:
            raise self.error("layer_norm_eps", f"must be positive, got {self.layer_norm_eps}")
        if not 0.0 <= self.mixln_alpha <= 1.0:
            raise self.error("mixln_alpha", f"must be in [0, 1], got {self.mixln_alpha}")
        if self.dyt_alpha <= 0:
            raise self.error("dyt_alpha", f"must be positive, got {self.dyt_alpha}")
        if self.attention_softcap < 0:
            raise self.error("attention_softcap", f"must be >= 0 (0 = off), got {self.attention_softcap}")
        if self.qk_norm and self.norm == "none":
            raise self.error("qk_norm", "needs a norm function; norm='none' makes it the identity")
        if self.positional == "rope" and self.head_dim % 2:
            # RoPE rotates pairs of a head's features (Su et al. 2021, Eq. 34): an odd head size leaves one alone
            raise self.error("positional", f"rope needs an even head size; d_model / n_heads = {self.head_dim}")
        if self.placement is Placement.NGPT:
            # nGPT's input is the unit-norm token vector itself and positions enter through RoPE (the paper and the
            # reference); its norms are x / ||x||, its queries and keys are normalised by the scheme
            for name, ok, why in (
                ("positional", self.positional == "rope", "positions enter through RoPE (a table added to the "
                 "unit-norm token vector would take it off the sphere): set positional=rope"),
                ("scale_embedding", not self.scale_embedding, "the input is the unit-norm token vector: set "
                 "scale_embedding=false"),
                ("embedding_norm", not self.embedding_norm, "the token vectors are already unit norm"),
                ("qk_norm", not self.qk_norm, "nGPT puts queries and keys on the sphere itself"),
                ("norm", self.norm == "layernorm", f"nGPT's only norm is x / ||x||; norm={self.norm!r} would not be "
                 "used (leave it at its default)"),
                ("init", self.init == "xavier", "nGPT projects every matrix onto the unit sphere at initialisation "
                 "('theory' would zero W^Q and W^K, which have unit rows in nGPT; 'bert''s scale would be undone)"),
            ):
                if not ok:
                    raise self.error(name, f"placement=ngpt: {why}")
        if self.init == "theory" and self.n_heads != 1:
            raise self.error("init", f"'theory' is the paper's single-head setting (Section 3.3); set n_heads=1, got {self.n_heads}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


# --------------------------------------------------------------------------------------------------------
# Optimisation


@config
class OptimConfig(Strict):
    """The optimizer. The paper: Adam with beta = (0.9, 0.98) (following Vaswani et al.), no gradient clipping."""

    name: Literal["adam", "adamw", "sgd", "radam"] = field(
        "adam", help="adam, adamw, sgd (the paper's 'vanilla SGD') or radam (torch.optim.RAdam, Figure 4)"
    )
    lr: float = field(5e-4, help="lr_max, the peak learning rate the schedule scales (Section 3.2)")
    betas: tuple[float, float] = field((0.9, 0.98), help="Adam/AdamW/RAdam betas (the paper: 0.9, 0.98)")
    eps: float = field(1e-8, help="Adam/AdamW/RAdam epsilon")
    weight_decay: float = field(0.0, help="weight decay (decoupled for adamw)")
    momentum: float = field(0.0, help="SGD momentum (0 = the paper's vanilla SGD)")
    clip_norm: float = field(0.0, help="clip the global gradient norm to this value; 0 = off (the paper)")

    def validate(self) -> None:
        if not self.lr > 0:
            raise self.error("lr", f"must be positive, got {self.lr}")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise self.error("betas", f"each must be in [0, 1), got {list(self.betas)}")
        for name in ("eps", "weight_decay", "momentum", "clip_norm"):
            if getattr(self, name) < 0:
                raise self.error(name, f"must be >= 0, got {getattr(self, name)}")
        if self.name != "sgd" and self.momentum:
            raise self.error("momentum", f"only SGD has momentum; optimizer is {self.name!r}")


@config
class ScheduleConfig(Strict):
    """The learning-rate schedule, a pure function of the update number t = 1, 2, ... (see train/schedules.py).

    Warm-up (paper eq. 1) for ``warmup_updates`` updates, then ``decay`` (from ``decay_from`` when set, lr_max
    held until then); ``step_epochs`` / ``step_updates``
    multiply by ``step_factor`` at each boundary (the paper's Pre-LN IWSLT run: constant 5e-4, x 0.1 at epoch 8);
    ``after_step: inverse_sqrt`` continues with an inverse square root from the first boundary (its WMT runs).
    """

    warmup_updates: int = field(0, help="T_warmup of eq. (1): lr(t) = t / T_warmup * lr_max; 0 or 1 means none")
    decay: Literal["inverse_sqrt", "linear", "constant"] = field(
        "inverse_sqrt",
        help="after warm-up (or from decay_from): inverse_sqrt (lr_max * sqrt(max(T_warmup, 1)) / sqrt(t), fairseq: "
        "with no warm-up and no decay_from, lr_max / sqrt(t) from the first update, 0.1 x lr_max by update 100), "
        "linear (to end_lr at the last update, BERT) or constant (the paper's Figure 6)",
    )
    decay_from: int = field(
        0, help="the update the decay starts from, lr_max held between the warm-up and it (inverse_sqrt: lr_max * "
        "sqrt(decay_from / t), the same curve whatever the warm-up); 0 = at the end of the warm-up (fairseq)")
    end_lr: float = field(0.0, help="the learning rate the linear decay reaches at the last update")
    step_epochs: tuple[int, ...] = field((), help="epochs (1-based) from whose start the lr is multiplied by step_factor")
    step_updates: tuple[int, ...] = field((), help="updates after which the lr is multiplied by step_factor")
    step_factor: float = field(0.1, help="multiplier of a step decay")
    after_step: Literal["same", "inverse_sqrt"] = field(
        "same", help="after the first step boundary: keep the decay (same) or continue as an inverse square root"
    )

    def validate(self) -> None:
        if self.warmup_updates < 0:
            raise self.error("warmup_updates", f"must be >= 0, got {self.warmup_updates}")
        if self.end_lr < 0:
            raise self.error("end_lr", f"must be >= 0, got {self.end_lr}")
        if self.decay_from < 0:
            raise self.error("decay_from", f"must be >= 0, got {self.decay_from}")
        if self.decay_from and self.decay == "constant":
            raise self.error("decay_from", "a constant schedule has no decay to start (set decay too)")
        if self.decay_from and self.decay_from < self.warmup_updates:
            # a decay from inside the warm-up would make lr jump down at its end: eq. (1) ends at lr_max
            raise self.error("decay_from", f"must be 0 or >= warmup_updates ({self.warmup_updates}), got "
                             f"{self.decay_from}")
        if not 0 < self.step_factor <= 1:
            raise self.error("step_factor", f"must be in (0, 1], got {self.step_factor}")
        for name, least in (("step_epochs", 2), ("step_updates", 1)):
            values = getattr(self, name)
            if any(v < least for v in values) or list(values) != sorted(set(values)):
                raise self.error(name, f"must be increasing integers >= {least}, got {list(values)}")
        if self.after_step != "same" and not (self.step_epochs or self.step_updates):
            raise self.error("after_step", "needs a step boundary (step_epochs or step_updates)")
        if self.decay_from and self.after_step != "same":
            # after_step restarts the decay at the first boundary: two anchors for one decay
            raise self.error("decay_from", "cannot be combined with after_step (which anchors the decay at the first "
                             "step boundary)")

    def past_the_end(self, total_updates: int, length: str = "") -> str | None:
        """Why this schedule does not fit a run of ``total_updates`` updates (a warm-up longer than the run, or a
        decay that starts after its end), or None; ``length`` says where the run's length came from (default: "N
        updates"). One check for the three places that know the run's length: TrainConfig.validate (max_updates),
        Trainer.fit (epochs x the epoch's updates) and build_schedule."""
        # each with its remedy: a short trial of a bundled recipe (--set max_updates=50 on de-en-cpu, whose decay
        # starts at update 100) would otherwise meet a refusal that does not say which setting to change
        length = length or f"{total_updates} updates"
        if self.warmup_updates > total_updates:
            return (f"warmup_updates={self.warmup_updates} is longer than the run ({length}): set "
                    f"schedule.warmup_updates to at most {total_updates}, or lengthen the run")
        if self.decay_from > total_updates:
            return (f"decay_from={self.decay_from} is after the run's end ({length}): set schedule.decay_from to 0 "
                    f"(from the end of the warm-up) or to {self.warmup_updates or 1}..{total_updates}, or lengthen the "
                    "run")
        return None


# --------------------------------------------------------------------------------------------------------
# Data

# The corpora vendored as package data (normlab/assets/corpora) and the task each one serves (its README.md).
VENDORED_CORPORA: dict[str, str] = {
    "de-en": "translation",
    "en-mono": "mlm",
    "paraphrase": "classification",
    "wic": "classification",
}
DEFAULT_CORPUS: dict[str, str] = {"translation": "de-en", "mlm": "en-mono", "classification": "paraphrase",
                                  "lm": "en-mono"}
TEXT_TASKS = ("mlm", "lm")
"""The tasks that read running text (``{split}.txt``, one paragraph per line): a corpus of one serves the other."""


def corpus_serves(corpus: str, task: str) -> bool:
    """Whether the vendored ``corpus`` can be used for ``task``: its own task, or both read running text (en-mono,
    vendored for the masked LM, is the causal LM's corpus too)."""
    own = VENDORED_CORPORA[corpus]
    return own == task or (own in TEXT_TASKS and task in TEXT_TASKS)


@config
class DataConfig(Strict):
    """The data: which corpus, how it is tokenized, how it is batched (normlab/data)."""

    task: Literal["translation", "mlm", "classification", "lm"] = field(
        "translation", help="translation (encoder-decoder), mlm (BERT masked LM), classification (sentence pairs) or "
        "lm (decoder-only language model, next-token prediction on packed blocks of running text)"
    )
    corpus: str = field(
        "",
        help="a vendored corpus (de-en, en-mono, paraphrase, wic) or a directory of your own files "
        "(train/valid[/test] splits; their names and formats per task: normlab/assets/corpora/README.md, \"Your own "
        "files\"); '' = the task's default: de-en, en-mono, "
        "paraphrase, en-mono (lm)",
    )
    format: Literal["auto", "tsv", "raw"] = field(
        "auto",
        help="files of a directory: tsv ({split}.tsv with a header), raw (fairseq-style {split}.{lang} for "
        "translation, {split}.txt for mlm and lm) or auto (tsv when {split}.tsv exists)",
    )
    source_lang: str = field("de", help="translation source language: a TSV header column or a raw file suffix")
    target_lang: str = field("en", help="translation target language (the paper: De->En)")
    labels: tuple[str, ...] = field(
        ("0", "1"), help="classification label set, in class-id order; a label outside it is an error"
    )
    tokenizer: str = field(
        "",
        help="'' trains a BPE on this corpus' train split; a corpus name or directory trains it on that "
        "corpus' train split instead (e.g. en-mono, to fine-tune with the pre-training vocabulary); "
        "a path to a sentencepiece .model file loads that model",
    )
    vocab_size: int = field(10000, help="joint source+target BPE vocabulary size (the paper: 10k for IWSLT14)")
    tokenizer_sentences: int = field(
        0, help="sentences (lines) the tokenizer is trained on, a seeded sample of the train split; 0 = all"
    )
    max_tokens: int = field(
        4096, help="tokens per global batch, padding included, counted as fairseq does (the paper: 4,096)"
    )
    max_sentences: int = field(
        0, help="also cap the examples per batch (0 = no cap; BERT fine-tuning uses 32 sentences per batch)"
    )
    train_subset: int = field(0, help="use only the first N training examples (0 = all)")
    valid_subset: int = field(0, help="use only the first N validation examples (0 = all)")
    block_size: int = field(
        128, help="masked-LM block length, [CLS] and [SEP] included; the language model's block (its input "
        "positions; the targets are the same tokens shifted by one); also the longest sentence-pair example"
    )
    mask_prob: float = field(0.15, help="masked-LM: share of non-special tokens selected for prediction (BERT: 0.15)")
    cache_dir: str = field("", help="tokenizer and binarized-split cache; '' = $NORMLAB_CACHE or ~/.cache/normlab")

    def validate(self) -> None:
        if self.corpus in VENDORED_CORPORA and not corpus_serves(self.corpus, self.task):
            fits = [name for name in VENDORED_CORPORA if corpus_serves(name, self.task)]
            raise self.error(
                "corpus", f"{self.corpus!r} is a {VENDORED_CORPORA[self.corpus]} corpus; task {self.task!r} uses {fits}"
            )
        if self.corpus in VENDORED_CORPORA and self.format == "raw":
            raise self.error("format", f"the vendored corpus {self.corpus!r} is TSV; use format=auto or tsv")
        for name in ("source_lang", "target_lang"):
            lang = getattr(self, name)
            if not re.fullmatch(r"[A-Za-z0-9_-]+", lang):
                raise self.error(name, f"expected a language code such as 'de', got {lang!r}")
        if self.task == "translation" and self.source_lang == self.target_lang:
            raise self.error("target_lang", f"equals source_lang={self.source_lang!r}")
        if len(self.labels) < 2 or len(set(self.labels)) != len(self.labels):
            raise self.error("labels", f"expected at least two distinct labels, got {list(self.labels)}")
        # 7 special ids (normlab/data/batch.py) and 256 byte pieces (byte fallback) come before any merge
        if self.vocab_size <= 263:
            raise self.error("vocab_size", f"must exceed 263 (7 special ids + 256 byte pieces), got {self.vocab_size}")
        if self.max_tokens <= 0:
            raise self.error("max_tokens", f"must be positive, got {self.max_tokens}")
        for name in ("tokenizer_sentences", "max_sentences", "train_subset", "valid_subset"):
            if getattr(self, name) < 0:
                raise self.error(name, f"must be >= 0 (0 = all), got {getattr(self, name)}")
        if self.block_size < 3:
            raise self.error("block_size", f"must be at least 3 ([CLS], one token, [SEP]), got {self.block_size}")
        if not 0.0 < self.mask_prob < 1.0:
            raise self.error("mask_prob", f"must be in (0, 1), got {self.mask_prob}")

    @property
    def corpus_name(self) -> str:
        """The corpus after defaults: a vendored name or the user's path, as given."""
        return self.corpus or DEFAULT_CORPUS[self.task]


# --------------------------------------------------------------------------------------------------------
# A training run


# budget_hours (TrainConfig): the run's length is decided at an update K from the mean time of updates K/4 .. K. The
# de-en-cpu recipe's run (docs/results/de-en-cpu: 3,000 updates on a 2-core Zen 4) had a per-update coefficient
# of variation of 0.12-0.20 over stretches of 300 updates (batches of one size in tokens, sentences of every
# length): a mean over the 15 updates of the shortest window, K = 20, is within ~4% of the run's (one standard
# error; 75 updates at K = 100: ~2%), and there the mean of updates 26-100 was 1.836 s against a median of 1.90
# over the whole run. Its first updates are left out: they fault the allocator's pages in and warm oneDNN's caches.
BUDGET_WINDOW = 20  # the least K where the length decides the learning rate (a linear decay's decay_from)
BUDGET_AT = 50  # K where it does not (inverse_sqrt, constant, steps), at least the warm-up and decay_from


@config
class TrainConfig(Strict):
    """One training run: model, data, optimizer, schedule and the loop's settings. ``normlab train --config``
    reads this from YAML (sections ``model:``, ``data:``, ``optim:``, ``schedule:`` and top-level keys)."""

    model: ModelConfig = field(default_factory=ModelConfig, help="the model")
    data: DataConfig = field(default_factory=DataConfig, help="the data")
    optim: OptimConfig = field(default_factory=OptimConfig, help="the optimizer")
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig, help="the learning-rate schedule")
    max_epochs: int = field(20, help="stop after this many epochs")
    max_updates: int = field(0, help="stop after this many updates, or at max_epochs if that comes first (said at "
                             "the start, and stopped_by max_epochs in summary.json); 0 = only max_epochs")
    max_hours: float = field(
        0.0, help="stop once the run has trained this many hours of wall-clock time, its validations and checkpoints "
        "included, summed over resumes (fairseq's --stop-time-hours): the update in progress ends, then a checkpoint "
        "and a validation, status completed with stopped_by max_hours; 0 = no limit. The learning-rate schedule "
        "does not know when that will be: use one that does not depend on the run's length, or budget_hours",
    )  # fmt: skip
    budget_hours: float = field(
        0.0, help="size the run to this many hours of updates, measured on this machine: at update `budget_at` "
        "(the linear decay's decay_from; else max(50, warmup_updates, decay_from)) the run's length becomes that "
        "update plus what the hours left buy at the mean time of the updates since a quarter of the way there, "
        "capped by max_updates and max_epochs (as they are when resumed); the length is kept in the checkpoints, "
        "and a run whose schedule decays linearly decays to end_lr at it. Validations, checkpoints and the test "
        "come on top; 0 = a length fixed by max_updates / max_epochs",
    )  # fmt: skip
    accumulate: int = field(1, help="batches per update (gradient accumulation; fairseq's update_freq)")
    label_smoothing: float = field(0.1, help="epsilon of the label-smoothed cross entropy (translation only; paper: 0.1)")
    loss_impl: Literal["chunked", "recompute", "plain"] = field(
        "chunked",
        help="translation and lm loss: chunked (output projection + loss in chunks of positions, gradients in the same "
        "pass; the fastest, no (N, V) logits kept), recompute (chunks recomputed in backward; least memory) or "
        "plain (full logits); the same values and gradients (normlab/train/losses.py)",
    )
    attention: Literal["auto", "sdpa", "sdpa-fp32", "matmul"] = field(
        "auto",
        help="attention kernel: auto (the fastest of the others, timed on three of the run's batches at its start "
        "and kept on resume; normlab/train/kernels.py), sdpa (torch's scaled_dot_product_attention), sdpa-fp32 (the "
        "same on fp32 copies of bf16 inputs) or matmul (batched matmuls, scores and softmax in fp32); the same "
        "function to rounding",
    )
    seed: int = field(1, help="seeds initialisation, data order, dropout and masking")
    precision: Literal["auto", "bf16", "fp32"] = field(
        "auto", help="auto: bf16 autocast where the device supports it (CUDA, CPUs with AVX-512 BF16/AMX), else fp32"
    )
    device: Literal["auto", "cpu", "cuda"] = field("auto", help="auto: CUDA when present, else CPU")
    eval_every: int = field(0, help="also evaluate every N updates (each after a checkpoint, so that a failed "
                                    "validation loses nothing); 0 = at the end of every epoch only")
    save_every: int = field(0, help="also checkpoint every N updates; 0 = at the end of every epoch only")
    keep_last: int = field(2, help="checkpoints kept besides the best")
    keep_every: int = field(0, help="also keep every checkpoint whose update is a multiple of this (0 = none)")
    log_every: int = field(10, help="updates between plain progress lines when stderr is not a terminal")
    init_from: str = field(
        "",
        help="a checkpoint directory whose tensors initialise the matching parameters when the run starts (e.g. a "
        "classifier's encoder.* from a masked-LM checkpoint); not applied on --resume",
    )
    valid_bleu: int = field(
        0, help="translation: validation sentences decoded for BLEU at every evaluation (0 = none; the paper: all)"
    )
    beam: int = field(5, help="beam size of the validation BLEU (the paper: 5)")
    lenpen: float = field(1.2, help="length penalty of the validation BLEU (the paper: 1.2)")
    test_checkpoint: str = field(
        "", help="translation: once the run has completed, score its test split with this checkpoint (best, last, an "
        "update number, or avg:N: the mean of the last N checkpoints' weights) at `beam` and `lenpen`, as normlab "
        "evaluate --split test does: sacreBLEU, tokenized BLEU and NLL in summary.json's `test` and in eval/; '' = "
        "none. Training to test BLEU in one command: a checkpoint need not outlive the machine it was written on",
    )  # fmt: skip
    diverge_factor: float = field(
        4.0,
        help="an update diverges (the run ends, status diverged) when its training loss is not finite or exceeds "
        "diverge_factor x ln(V), V the vocabulary (or classes): ln(V) is the loss of a uniform guess; 0 = only "
        "non-finite losses",
    )

    @property
    def budget_at(self) -> int:
        """The update at which ``budget_hours`` decides the run's length (:data:`BUDGET_WINDOW`, :data:`BUDGET_AT`):
        a linear decay's start, before which the rate does not depend on the length; otherwise once the warm-up
        and the held rate are over, and no sooner than update 50."""
        sc = self.schedule
        if sc.decay == "linear":
            return sc.decay_from
        return max(BUDGET_AT, sc.warmup_updates, sc.decay_from)

    def validate(self) -> None:
        for name in ("max_epochs", "accumulate", "keep_last", "log_every", "beam"):
            if getattr(self, name) < 1:
                raise self.error(name, f"must be >= 1, got {getattr(self, name)}")
        if not (self.max_hours >= 0 and math.isfinite(self.max_hours)):
            raise self.error("max_hours", f"must be >= 0 (0 = no limit), got {self.max_hours}")
        if not (self.budget_hours >= 0 and math.isfinite(self.budget_hours)):
            raise self.error("budget_hours", f"must be >= 0 (0 = no budget), got {self.budget_hours}")
        if self.budget_hours and self.schedule.decay == "linear" and self.schedule.decay_from < BUDGET_WINDOW:
            # the length is decided before the decay starts, or the first updates would have run on a slope that
            # the decision then changes: the schedule stays a pure function of the update (ScheduleConfig)
            raise self.error("budget_hours", "with a linear decay the run's length is decided where the decay "
                             f"starts: set schedule.decay_from >= {BUDGET_WINDOW} (lr_max held until then; "
                             f"{BUDGET_WINDOW} updates or more to time), got {self.schedule.decay_from}")
        for name in ("max_updates", "eval_every", "save_every", "valid_bleu", "keep_every"):
            if getattr(self, name) < 0:
                raise self.error(name, f"must be >= 0, got {getattr(self, name)}")
        if why := placement_task_error(self.model.placement, self.data.task):
            raise self.error("model", why)
        if self.valid_bleu and self.data.task != "translation":
            raise self.error("valid_bleu", f"BLEU is for translation, not {self.data.task}")
        if self.test_checkpoint:
            if self.data.task != "translation":
                raise self.error("test_checkpoint", f"test BLEU is for translation, not {self.data.task}")
            avg = CHECKPOINT_AVERAGE.fullmatch(self.test_checkpoint)
            if not (avg or self.test_checkpoint in ("best", "last") or self.test_checkpoint.isdigit()):
                raise self.error("test_checkpoint", f"expected best, last, an update number or avg:N, got "
                                 f"{self.test_checkpoint!r}")  # fmt: skip
            if avg and not 2 <= int(avg[1]) <= self.keep_last:
                hint = f" (--set keep_last={avg[1]})" if int(avg[1]) >= 2 else ""
                raise self.error("test_checkpoint", f"{self.test_checkpoint} averages {avg[1]} checkpoints: needs "
                                 f"2 <= N <= keep_last={self.keep_last}{hint}")  # fmt: skip
        if not 0 <= self.seed < 2**32:  # numpy's and the data pipeline's seeds are unsigned 32-bit
            raise self.error("seed", f"must be in [0, 2**32), got {self.seed}")
        if self.diverge_factor != 0 and self.diverge_factor <= 1:
            raise self.error("diverge_factor", f"must be 0 (off) or above 1, got {self.diverge_factor}")
        if self.lenpen < 0:
            raise self.error("lenpen", f"must be >= 0, got {self.lenpen}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise self.error("label_smoothing", f"must be in [0, 1), got {self.label_smoothing}")
        length = f"max_updates={self.max_updates}"
        if self.max_updates and (why := self.schedule.past_the_end(self.max_updates, length)):
            if self.budget_hours and self.schedule.decay == "linear" and self.schedule.decay_from > self.max_updates:
                # the budget's own rule (above) refuses decay_from 0 and below 20: name the range both allow
                why += (f" (with budget_hours: decay_from {BUDGET_WINDOW}..{self.max_updates}, or budget_hours=0)"
                        if self.max_updates >= BUDGET_WINDOW else " (and budget_hours=0: too short to time)")
            raise self.error("schedule", why)
