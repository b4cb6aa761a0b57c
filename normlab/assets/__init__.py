"""The files normlab ships beside its code: the vendored corpora and the run configs (package data).

One owner of their layout inside the package, so that a wheel, an editable install and a source checkout all
find them the same way, through :mod:`importlib.resources` (never ``normlab.__file__`` and the folder above it,
which holds nothing once normlab is installed from a wheel)::

    normlab/assets/corpora/   de-en, en-mono, tasks/paraphrase, tasks/wic (xz) + README.md (sources, licences)
    normlab/assets/configs/   bert-{tiny,mini,small,base}-{post,pre}.yaml, de-en-cpu.yaml
                              (``normlab train --config bert-tiny-post``)
    normlab/assets/edges.json the stability edges the committed sweeps measured (normlab.analysis.edges)

``pyproject.toml`` lists both folders as package data; ``tests/test_wheel.py`` builds the wheel and checks.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

from normlab.config import ConfigError, load_yaml

__all__ = ["corpora_root", "configs_dir", "bundled_configs", "config_file", "load_config_file", "edges_file"]


def _dir(name: str) -> Path:
    root = resources.files(__name__) / name
    if not isinstance(root, Path):  # a zip import: the readers need real files
        raise FileNotFoundError(f"normlab's {name} are inside a zip archive ({root}); install normlab unzipped "
                                "(pip does) or set NORMLAB_DATA to a folder of the corpora")  # fmt: skip
    return root


def corpora_root() -> Path:
    """The vendored corpora: ``$NORMLAB_DATA`` when set, else the package's ``assets/corpora`` folder."""
    env = os.environ.get("NORMLAB_DATA")
    if env:
        return Path(env).expanduser()
    return _dir("corpora")


def edges_file() -> Path:
    """The table of measured stability edges (normlab.analysis.edges owns its format); FileNotFoundError when
    normlab runs from a zip archive."""
    path = resources.files(__name__) / "edges.json"
    if not isinstance(path, Path):
        raise FileNotFoundError(f"normlab's edges.json is inside a zip archive ({path}); install normlab unzipped")
    return path


def configs_dir() -> Path:
    """The folder of the bundled run configs."""
    return _dir("configs")


def bundled_configs() -> list[str]:
    """Names of the bundled run configs (the file stems: ``bert-tiny-post``, ...), sorted."""
    return sorted(p.stem for p in configs_dir().glob("*.yaml"))


def config_file(name: str) -> Path:
    """A ``--config`` argument as a file: an existing path as given, else a bundled config by name (with or
    without ``.yaml``, e.g. ``bert-tiny-post``); else a :class:`ConfigError` of one line that lists the bundled
    ones (and names the bundled config a path such as the old ``configs/bert-tiny-post.yaml`` meant)."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    stem = path.name[: -len(".yaml")] if path.name.endswith(".yaml") else path.name
    bundled = configs_dir() / f"{stem}.yaml"
    if path.name == name and bundled.is_file():
        return bundled
    if bundled.is_file():
        raise ConfigError(f"--config {name}: no such file; the bundled config is --config {stem}")
    raise ConfigError(f"--config {name}: no such file, nor a bundled config ({', '.join(bundled_configs())})")


def load_config_file(name: str, section: str = "") -> dict[str, Any]:
    """A ``--config`` file as a plain dict: a YAML path, or a config bundled with normlab by name
    (``bert-tiny-post``, :func:`config_file`). With ``section`` (``model``, ``data``), that section of a run
    config, or the whole file when it has no such section."""
    if Path(name).expanduser().is_dir():
        raise ConfigError(f"--config {name}: is a directory, not a YAML file")
    path = config_file(name)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{name}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise ConfigError(f"{name}: cannot be read ({e.strerror})") from None
    try:
        data = load_yaml(text) or {}
    except ConfigError as e:
        raise ConfigError(f"{name}: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: expected a mapping of config sections")
    if section:
        data = data.get(section, data)
    return data
