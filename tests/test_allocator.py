"""The C allocator a normlab process runs on (normlab.allocator, issue 31): the choice on synthetic machines, and
``python -m normlab`` re-executing itself onto jemalloc where this machine has it (CI installs it as root and
sets NORMLAB_REQUIRE_JEMALLOC=1, so that the end-to-end test cannot skip there)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from normlab import allocator
from normlab.allocator import AllocatorError, find, loaded, plan

ROOT = Path(__file__).resolve().parents[1]

MAPS_GLIBC = """\
7f0000000000-7f0000001000 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6
7f0000002000-7f0000003000 r-xp 00000000 08:01 2 /usr/bin/python3.11
"""
MAPS_JEMALLOC = MAPS_GLIBC + (
    "7f0000004000-7f0000005000 r-xp 00000000 08:01 3 /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n"
)


def test_loaded_reads_the_mapped_libraries():
    assert loaded(MAPS_GLIBC) == "system"
    assert loaded(MAPS_JEMALLOC) == "jemalloc"
    assert loaded(MAPS_GLIBC + "7f00-7f01 r-xp 0 0 4 /opt/gperftools/lib/libtcmalloc_minimal.so.4.5.10\n") == "tcmalloc"
    assert loaded("") == "system"


@pytest.fixture
def libdir(tmp_path: Path) -> Path:
    (tmp_path / "libjemalloc.so.2").write_bytes(b"\x7fELF")
    return tmp_path


@pytest.mark.parametrize(
    ("env", "running", "platform", "expect"),
    [
        ({}, "system", "linux", "found"),  # auto, the library there: preload it
        ({"NORMLAB_ALLOCATOR": "auto"}, "system", "linux", "found"),
        ({"NORMLAB_ALLOCATOR": "jemalloc"}, "system", "linux", "found"),
        ({"NORMLAB_ALLOCATOR": "system"}, "system", "linux", None),  # asked for the C library's
        ({}, "jemalloc", "linux", None),  # already preloaded (by the user or by the first exec)
        ({}, "tcmalloc", "linux", None),
        ({"_NORMLAB_ALLOCATOR_EXEC": "1"}, "system", "linux", None),  # re-executed and still not loaded: no loop
        ({}, "system", "darwin", None),  # LD_PRELOAD is Linux's
        ({"LD_PRELOAD": "/opt/mimalloc/libmimalloc.so"}, "system", "linux", None),  # the user's own: left alone
        ({"LD_PRELOAD": "/usr/lib/libasan.so.8"}, "system", "linux", None),  # a sanitizer must stay first
        ({"NORMLAB_ALLOCATOR": "jemalloc", "LD_PRELOAD": "libm.so.6"}, "system", "linux", "found"),  # asked for
        ({"NORMLAB_ALLOCATOR": "jemalloc"}, "jemalloc", "linux", None),  # already on it
    ],
)
def test_plan(libdir: Path, env: dict[str, str], running: str, platform: str, expect: str | None):
    got = plan(env, running=running, dirs=[libdir], platform=platform)
    assert got == (libdir / "libjemalloc.so.2" if expect == "found" else None)


def test_plan_without_the_library(tmp_path: Path):
    assert plan({}, running="system", dirs=[tmp_path], platform="linux") is None  # auto: the C library's, quietly
    with pytest.raises(AllocatorError, match="apt install libjemalloc2"):
        plan({"NORMLAB_ALLOCATOR": "jemalloc"}, running="system", dirs=[tmp_path], platform="linux")
    with pytest.raises(AllocatorError, match="libtcmalloc-minimal4"):
        plan({"NORMLAB_ALLOCATOR": "tcmalloc"}, running="system", dirs=[tmp_path], platform="linux")
    with pytest.raises(AllocatorError, match="no such file"):
        missing = {"NORMLAB_ALLOCATOR": str(tmp_path / "libnothing.so")}
        plan(missing, running="system", dirs=[tmp_path], platform="linux")
    with pytest.raises(AllocatorError, match="expected auto, system, jemalloc, tcmalloc"):
        plan({"NORMLAB_ALLOCATOR": "jemaloc"}, running="system", dirs=[tmp_path], platform="linux")


@pytest.mark.parametrize(
    ("env", "running", "platform", "match"),
    [
        ({"NORMLAB_ALLOCATOR": "jemalloc"}, "system", "darwin", "for Linux, not darwin"),
        ({"NORMLAB_ALLOCATOR": "tcmalloc"}, "jemalloc", "linux", "already runs on jemalloc"),
    ],
)
def test_an_explicit_choice_that_cannot_be_had_is_an_error(libdir: Path, env: dict[str, str], running: str,
                                                           platform: str, match: str):  # fmt: skip
    with pytest.raises(AllocatorError, match=match):
        plan(env, running=running, dirs=[libdir], platform=platform)


def test_a_path_is_preloaded_as_given(libdir: Path):
    lib = libdir / "libjemalloc.so.2"
    assert plan({"NORMLAB_ALLOCATOR": str(lib)}, running="system", dirs=[], platform="linux") == lib


def test_find_takes_the_first_folder_that_has_it(tmp_path: Path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (b / "libtcmalloc_minimal.so.4").write_bytes(b"")
    (a / "libtcmalloc.so.4").write_bytes(b"")
    assert find("tcmalloc", [a, b]) == a / "libtcmalloc.so.4"
    assert find("jemalloc", [a, b]) is None


def test_importing_the_package_does_not_import_torch():
    """``python -m normlab`` imports the package before __main__ chooses the allocator: torch must not be in yet,
    or the re-executed process pays its import twice."""
    code = "import sys, normlab; print('torch' in sys.modules); normlab.ModelConfig; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout.split()  # fmt: skip
    assert out == ["False", "False"], out  # ModelConfig comes from normlab.config, which needs no torch either


def _train(tmp_path: Path, name: str, **env: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "normlab", "train", "--out", str(tmp_path / name), "--quiet",
            "--set", "model.d_model=16", "--set", "model.n_heads=2", "--set", "model.d_ffn=32",
            "--set", "model.encoder_layers=1", "--set", "model.decoder_layers=1", "--set", "model.vocab_size=600",
            "--set", "data.vocab_size=600", "--set", "data.tokenizer_sentences=2000", "--set", "data.train_subset=40",
            "--set", "data.valid_subset=8",
            "--set", "data.max_tokens=256", "--set", "max_updates=1", "--set", "device=cpu",
            # one kernel: a kernel chosen by timing (attention=auto) may differ between two runs under load (seen:
            # the bf16 losses of two such runs then differ in rounding), which is not what these tests look at
            "--set", "attention=sdpa-fp32",
            "--set", f"data.cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    full = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "_NORMLAB_ALLOCATOR_EXEC")}
    return subprocess.run(args, check=False, capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**full, "PYTHONPATH": str(ROOT), **env})  # fmt: skip


def _env(**extra: str) -> dict[str, str]:
    drop = ("LD_PRELOAD", "_NORMLAB_ALLOCATOR_EXEC", "NORMLAB_ALLOCATOR")
    base = {k: v for k, v in os.environ.items() if k not in drop}
    return {**base, "PYTHONPATH": str(ROOT), **extra}


def test_a_library_that_does_not_load_is_a_warning_and_no_second_try(tmp_path: Path):
    """A file that is not a shared library: ld.so says so, the re-executed process says it goes on without it
    (once: no exec loop), and takes it out of the LD_PRELOAD its own children would inherit."""
    fake = tmp_path / "libnotalib.so"
    fake.write_text("not an ELF file\n")
    code = ("import os, sys; from normlab.__main__ import entry; sys.argv[1:] = ['--version']; "
            "print(os.environ.get('LD_PRELOAD', '-'), flush=True); entry()")
    script = tmp_path / "normlab"  # the main program must be normlab's own for the re-exec to happen
    script.write_text(code.replace("; ", "\n"))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                       env=_env(NORMLAB_ALLOCATOR=str(fake)), check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "-"  # the first process: nothing preloaded yet
    assert r.stdout.splitlines()[1] == str(fake)  # the re-executed one, before reexec() cleaned it
    assert r.stderr.count(f"normlab: warning: {fake} did not load") == 1, r.stderr
    assert r.stdout.splitlines()[-1].startswith("normlab ")


def test_no_reexec_unless_normlab_is_the_main_program(libdir: Path):
    """``python -c`` (or a notebook, runpy) calling entry(): re-executing its command line would run the host's
    code twice, so the allocator stays; the same with a script on stdin."""
    lib = libdir / "libjemalloc.so.2"
    code = "import os; from normlab.allocator import reexec; print('pre'); reexec(); print(os.environ.get('LD_PRELOAD', '-'))"
    code = code.replace("; print('pre')", "; print('pre', flush=True)")
    for args, stdin in (([sys.executable, "-c", code], None), ([sys.executable, "-"], code)):
        r = subprocess.run(args, input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=300,
                           env=_env(NORMLAB_ALLOCATOR=str(lib)), check=False)  # fmt: skip
        assert (r.returncode, r.stdout.split()) == (0, ["pre", "-"]), (args[1], r.stdout, r.stderr)


def test_an_allocator_that_is_not_there_is_one_line(tmp_path: Path):
    r = _train(tmp_path, "run", NORMLAB_ALLOCATOR=str(tmp_path / "libnothing.so"))
    assert r.returncode == 2, r.stderr
    line = f"normlab: error: NORMLAB_ALLOCATOR={tmp_path / 'libnothing.so'}: no such file"
    assert r.stderr.strip().splitlines() == [line]
    assert not (tmp_path / "run").exists()


def test_python_m_normlab_runs_on_jemalloc_where_the_machine_has_it(tmp_path: Path):
    if allocator.find("jemalloc") is None:
        if os.environ.get("NORMLAB_REQUIRE_JEMALLOC"):
            pytest.fail("NORMLAB_REQUIRE_JEMALLOC is set and no libjemalloc.so.2 is found in "
                        + ", ".join(map(str, allocator.search_dirs())))  # fmt: skip
        pytest.skip("no libjemalloc.so.2 on this machine (apt install libjemalloc2); the re-exec is not exercised")
    on = _train(tmp_path, "je")
    off = _train(tmp_path, "sys", NORMLAB_ALLOCATOR="system")
    assert on.returncode == 0 and off.returncode == 0, (on.stderr[-2000:], off.stderr[-2000:])
    s_on = json.loads((tmp_path / "je" / "summary.json").read_text())
    s_off = json.loads((tmp_path / "sys" / "summary.json").read_text())
    assert (s_on["allocator"], s_off["allocator"]) == ("jemalloc", "system")
    # where memory comes from changes nothing a run computes: the same loss, bit for bit
    m_on = [json.loads(x) for x in (tmp_path / "je" / "metrics.jsonl").read_text().splitlines()]
    m_off = [json.loads(x) for x in (tmp_path / "sys" / "metrics.jsonl").read_text().splitlines()]
    assert [m.get("loss") for m in m_on] == [m.get("loss") for m in m_off]


def _run_on(which: str, code: str) -> list[str]:
    """``code``'s printed words, run in a fresh process on jemalloc (preloaded) or glibc's malloc ("system");
    a skip where that allocator is not there (or not Linux)."""
    if sys.platform != "linux" or (which == "system" and platform.libc_ver()[0] != "glibc"):
        pytest.skip("LD_PRELOAD, /proc and both allocators' controls: Linux with glibc")
    env = _env()
    if which == "jemalloc":
        if (lib := allocator.find("jemalloc")) is None:
            if os.environ.get("NORMLAB_REQUIRE_JEMALLOC"):
                pytest.fail("NORMLAB_REQUIRE_JEMALLOC is set and no libjemalloc.so.2 is found")
            pytest.skip("no libjemalloc.so.2 on this machine (apt install libjemalloc2)")
        env = _env(LD_PRELOAD=str(lib))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=env, check=True).stdout.split()  # fmt: skip


_KEEP_AND_PURGE = """
import resource, torch
from normlab.train.throughput import release_memory, tune_malloc
def rss(): return int(open("/proc/self/statm").read().split()[1]) * 4096
def faults(): return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
tuned = tune_malloc()
base, counts = rss(), []
for _ in range(3):  # 256 MB, above jemalloc's oversize threshold (8 MB) and glibc's mmap threshold
    f0 = faults(); x = torch.ones(1 << 26); del x; counts.append(faults() - f0)
kept = rss() - base
released = release_memory()
print(tuned, released, counts[1], counts[2], kept >> 20, (kept - (rss() - base)) >> 20)
"""


@pytest.mark.parametrize("which", ["jemalloc", "system"])
def test_malloc_keeps_freed_pages_until_released(which):
    """tune_malloc makes the allocator keep freed pages (on jemalloc: decay off; on glibc: no mmap, no trim), so
    that the next update reuses them without page faults (a quick-scale update faulted ~50,000 pages in again
    on jemalloc's default decay), and release_memory hands them back (jemalloc: every arena purged; glibc:
    malloc_trim). Checked with a 256 MB tensor made and freed three times in a fresh process: on jemalloc the
    repeats take (almost) no page faults; on both the pages stay resident until the release, which returns them."""
    out = _run_on(which, _KEEP_AND_PURGE)
    tuned, released, second, third, kept_mb, returned_mb = out
    assert (tuned, released) == ("True", "True"), out
    if which == "jemalloc":  # 65,536 pages when they are handed back at each free (jemalloc's default decay)
        assert int(second) < 1000 and int(third) < 1000, out
    # glibc may serve a repeat from new pages of its heap (seen: one of the two, or both, with 768 MB resident);
    # what holds there is that the pages stay until the release, which returns them
    assert int(kept_mb) >= 200 and int(returned_mb) >= 200, out


_KEPT_FOR_A_BLOCK = """
import torch
from normlab.train.throughput import kept_pages
def rss(): return int(open("/proc/self/statm").read().split()[1]) * 4096
base = rss()
with kept_pages() as tuned:
    x = torch.ones(1 << 26); del x  # 256 MB
    inside = rss() - base
after_block = rss() - base
x = torch.ones(1 << 26); del x
after_free = rss() - base
print(tuned, inside >> 20, after_block >> 20, after_free >> 20)
"""


@pytest.mark.parametrize("which", ["jemalloc", "system"])
def test_kept_pages_lasts_for_its_block(which):
    """kept_pages (the wall-time probe's: it times an update as a worker runs it, in a process that goes on): the
    freed 256 MB stay resident inside the block, are handed back at its end, and a 256 MB tensor freed after it
    goes back to the OS as with the allocator's own settings (jemalloc: the arena for large allocations, first
    used inside the block, takes the default decay again; glibc: mmap and trimming as by default)."""
    out = _run_on(which, _KEPT_FOR_A_BLOCK)
    tuned, inside, after_block, after_free = out[0], *map(int, out[1:])
    assert tuned == "True" and inside >= 200, out
    assert after_block < 50 and after_free < 50, out


def test_the_tunables_stand_aside_on_another_allocator(monkeypatch):
    """Where neither glibc nor jemalloc serves malloc (tcmalloc preloaded, say), tune_malloc, release_memory and
    kept_pages touch nothing and say so (False)."""
    from normlab.train import throughput

    monkeypatch.setattr(allocator, "running", lambda: "tcmalloc")
    assert throughput._glibc() is None and throughput._jemalloc() is None
    assert (throughput.tune_malloc(), throughput.release_memory()) == (False, False)
    with throughput.kept_pages() as tuned:
        assert tuned is False
