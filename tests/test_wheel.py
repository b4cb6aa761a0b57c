"""normlab as a package (issue 18): the wheel carries its corpora and configs, and the README's "Install as a
package" commands work: a wheel, a fresh virtual environment (no system site-packages, torch from the same
pinned release), then ``normlab data`` and ``normlab reproduce --scale smoke`` from a directory outside the
repository, with nothing of the checkout on the path.

Measured on the 2-core development machine: ~2.5-3.5 min under other developers' load. The wheel takes ~10 s
(pip builds it in an isolated environment, as a user's pip does); the venv's installs ~60-80 s: torch's 183 MB
wheel is read from this machine's disk (``find-links``), so pip's cache has nothing to save, while
``--no-compile`` (added to the README's ``pip install``) skips byte-compiling torch's modules. ``normlab
reproduce --scale smoke`` takes ~30-90 s with a warm data cache. The data cache is the environment's
(``$NORMLAB_CACHE`` or ~/.cache/normlab, as in tests/test_reproduce.py): its entries are named by the bytes of
the files and the settings, so the installed corpora hit the entries the checkout's made (cold, add ~2 min).
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from normlab.assets import bundled_configs
from normlab.config import Placement
from normlab.data.corpora import VENDORED_FILES
from tests.test_readme import README_INSTALL

ROOT = Path(__file__).resolve().parents[1]


def _argv(line: str, venv: Path) -> tuple[list[str], bool]:
    """A README line as an argv for this test: ``~/normlab-env`` is ``venv``, ``.venv/bin/pip`` and ``python3``
    are this interpreter's; returns (argv, whether it runs in the directory outside the checkout)."""
    outside = line.startswith("cd ~ && ")
    argv = shlex.split(line.removeprefix("cd ~ && "))
    argv = [str(venv) + a.removeprefix("~/normlab-env") if a.startswith("~/normlab-env") else a for a in argv]
    if argv[0] == ".venv/bin/pip":
        argv = [sys.executable, "-m", "pip", *argv[1:]]
    elif argv[0] == "python3":
        argv = [sys.executable, *argv[1:]]
    if argv[0] == str(venv / "bin" / "pip"):
        argv = [str(venv / "bin" / "python"), "-m", "pip", *argv[1:]]
    if argv[1:4] == ["-m", "pip", "install"]:
        argv[4:4] = ["-q", "--no-compile"]
    return argv, outside


@pytest.mark.slow
def test_readme_install_as_a_package(tmp_path, capsys):
    # a copy of the sources: `pip wheel .` in the checkout would leave build/ and *.egg-info there, and
    # setuptools' build/lib keeps files deleted since
    src, work, venv = tmp_path / "src", tmp_path / "elsewhere", tmp_path / "normlab-env"
    src.mkdir()
    work.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "normlab", src / "normlab", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NORMLAB_DATA", "VIRTUAL_ENV")}
    env.update(OMP_NUM_THREADS="1", PYTHONNOUSERSITE="1")

    assert any("pip wheel" in line for line in README_INSTALL) and any("reproduce" in line for line in README_INSTALL)
    timings, outputs = {}, {}
    t_all = time.perf_counter()
    for line in README_INSTALL:
        argv, outside = _argv(line, venv)
        cwd = work if outside else src
        argv = [a for arg in argv for a in (sorted(glob.glob(arg, root_dir=cwd)) if "*" in arg else [arg])]
        t0 = time.perf_counter()
        # under pytest-timeout's 600 s, so that a slow step names itself
        proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=500)
        timings[line] = time.perf_counter() - t0
        assert proc.returncode == 0, f"{line}\n{shlex.join(argv)}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        outputs[line] = proc.stdout

    # the wheel lists the corpora and the configs
    [wheel] = (src / "dist").glob("normlab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [rel for rel in VENDORED_FILES if f"normlab/assets/corpora/{rel}" not in names]
    missing += [n for n in bundled_configs() if f"normlab/assets/configs/{n}.yaml" not in names]
    missing += [n for n in ["normlab/assets/edges.json"] if n not in names]  # diagnose's measured edges
    assert not missing, f"not in {wheel.name}: {missing}"

    # the venv's normlab is the wheel's (not the checkout), its torch the pinned CPU build
    py = str(venv / "bin" / "python")
    where = subprocess.run([py, "-c", "import normlab, torch; print(normlab.__file__, torch.__version__, "
                                      "torch.version.cuda)"], cwd=work, env=env, capture_output=True, text=True,
                           check=True).stdout.split()  # fmt: skip
    assert Path(where[0]).is_relative_to(venv) and where[1].startswith("2.13.0") and where[2] == "None", where
    package = Path(where[0]).parent
    [data_line] = [line for line in README_INSTALL if " data " in line]
    assert f"corpus wic ({package / 'assets' / 'corpora' / 'tasks' / 'wic'})" in outputs[data_line]
    assert (work / "normlab-smoke" / "report" / "index.html").is_file()

    # the bundled configs by name, and --help from the dataclasses, in the installed package
    normlab = str(venv / "bin" / "normlab")
    out = subprocess.run([normlab, "model", "--config", "bert-tiny-post", "--task", "mlm"], cwd=work, env=env,
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 0 and out.stdout.startswith("MaskedLM: placement=post"), out.stderr
    out = subprocess.run([normlab, "train", "--help"], cwd=work, env=env, capture_output=True, text=True)
    placements = "|".join(p.value for p in Placement)
    assert f"\n  model.placement ({placements}) = post\n" in out.stdout

    with capsys.disabled():
        print(f"\n{wheel.name}: {wheel.stat().st_size:,} bytes; total {time.perf_counter() - t_all:.0f} s: "
              + "; ".join(f"{line.split(' #')[0]} {t:.0f} s" for line, t in timings.items()))
