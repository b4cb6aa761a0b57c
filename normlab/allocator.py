"""Which C allocator a normlab process runs on: jemalloc where the machine has it, else the C library's (issue 31).

A training step allocates and frees tensors whose sizes change with every batch (token buckets), and glibc's
heap fragments under them: a quick-scale run (6-6, d=256, 2,048 tokens, bf16, 1 thread) held ~690 MiB in use
and ~600 MiB free inside the heap at its peak of resident memory (glibc's ``mallinfo2``), however its tunables
were set (normlab.train.throughput.tune_malloc, release_memory; issue 31's note lists six variants, none below
1.37 GB at 20 updates). jemalloc serves each size class from its own slabs, so the holes do not accumulate.
(Its default, handing idle pages back to the OS on a timer, costs a training step its page faults: a training
process turns it off and purges every few updates instead, normlab.train.throughput.tune_malloc.) Measured on a 2-core AMD EPYC Zen 4, the quick scale's Pre-LN run,
peak resident memory (``/usr/bin/time -v``):

    20 updates, a validation with BLEU every 10:   glibc (normlab's tunables) 1.445 GB, jemalloc 1.208 GB,
                                                   jemalloc never returning pages (dirty/muzzy decay -1) 1.390 GB
    120 updates, a validation every 100:           glibc 1.837 GB, jemalloc 1.372 GB (-25%); the two side by side,
                                                   1 thread each: user + system CPU 165 + 9 s against 147 + 19 s
                                                   (jemalloc faults pages in again after returning them: 5.4 M
                                                   minor faults against 3.3 M); that comparison did not isolate
                                                   the faults' cost, which a later one did: ~1.3x an update at
                                                   the quick shape (normlab.train.throughput.tune_malloc, which
                                                   now keeps jemalloc's pages in a training process)

PyTorch's own CPU launcher (``torch.backends.xeon.run_cpu``) preloads jemalloc or tcmalloc the same way. An
allocator can only be chosen before the process starts, through ``LD_PRELOAD``, so ``python -m normlab`` and
the ``normlab`` command re-execute themselves once, before torch is imported, with the library preloaded
(:func:`reexec`); the processes they start (a grid's workers, torchrun's ranks) inherit it. The choice:

* ``NORMLAB_ALLOCATOR`` = ``auto`` (default): jemalloc when a ``libjemalloc.so.2`` is found (:func:`search_dirs`),
  else the C library's; ``jemalloc`` / ``tcmalloc``: that one, an error (exit 2) when it is not found; ``system``:
  the C library's; or the path of a shared library to preload.
* ``auto`` does nothing where the process already preloads something (the user's own ``LD_PRELOAD``: another
  allocator, a sanitizer), off Linux, or when the main program is not normlab's own (``python -c``, runpy from a
  notebook); a re-executed process whose library did not load goes on without it (one warning, no second try).

Debian and Ubuntu ship jemalloc as ``libjemalloc2`` (``apt install libjemalloc2``); conda as ``jemalloc``. The
allocator changes where memory comes from, not a single number a run computes. A run records the allocator it
ran on (summary.json ``allocator``), as it records its attention kernel.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

__all__ = ["LIBRARIES", "ENV", "AllocatorError", "search_dirs", "choice", "find", "loaded", "running", "plan",
           "with_preload", "reexec"]

ENV = "NORMLAB_ALLOCATOR"
_GUARD = "_NORMLAB_ALLOCATOR_EXEC"  # set in the re-executed process: never a second exec

LIBRARIES: dict[str, tuple[str, ...]] = {
    "jemalloc": ("libjemalloc.so.2", "libjemalloc.so"),
    "tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc.so.4", "libtcmalloc_minimal.so", "libtcmalloc.so"),
}


def _multiarch() -> str:
    machine = os.uname().machine
    return {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu",
            "s390x": "s390x-linux-gnu"}.get(machine, f"{machine}-linux-gnu")  # fmt: skip


def search_dirs() -> list[Path]:
    """Where :func:`find` looks, in order: the Python environment's lib (a venv or conda), ``$CONDA_PREFIX/lib``,
    then the system's library folders (the multiarch one first, as Debian installs there)."""
    dirs = [Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"]
    if os.environ.get("CONDA_PREFIX"):
        dirs.append(Path(os.environ["CONDA_PREFIX"]) / "lib")
    arch = _multiarch()
    dirs += [Path("/usr/local/lib"), Path("/usr/local/lib64"), Path("/usr/lib") / arch, Path("/lib") / arch,
             Path("/usr/lib64"), Path("/usr/lib")]
    seen: list[Path] = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def find(name: str, dirs: list[Path] | None = None) -> Path | None:
    """The first library of allocator ``name`` (a key of :data:`LIBRARIES`) in ``dirs`` (default
    :func:`search_dirs`)."""
    for d in search_dirs() if dirs is None else dirs:
        for lib in LIBRARIES[name]:
            if (d / lib).is_file():
                return d / lib
    return None


def loaded(maps: str | None = None) -> str:
    """The allocator this process runs on: ``jemalloc`` or ``tcmalloc`` when one is mapped into it (read from
    ``/proc/self/maps``, or ``maps``), else ``system`` (the C library's; also where /proc is not readable)."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "system"
    for line in maps.splitlines():
        base = line.rsplit("/", 1)[-1]
        for name in LIBRARIES:
            if base.startswith(f"lib{name}"):
                return name
    return "system"


@functools.cache
def running() -> str:
    """:func:`loaded` of this process, read once: a process's allocator cannot change after it started."""
    return loaded()


class AllocatorError(Exception):
    """An allocator was asked for by name and is not on this machine."""


def choice(environ: dict[str, str] | os._Environ[str] | None = None) -> str:
    """The setting: ``NORMLAB_ALLOCATOR`` (default ``auto``), checked."""
    value = (os.environ if environ is None else environ).get(ENV, "auto").strip() or "auto"
    if value in ("auto", "system", *LIBRARIES) or "/" in value:
        return value
    raise AllocatorError(f"{ENV}={value!r}: expected auto, system, {', '.join(LIBRARIES)} or the path of a shared "
                         "library")  # fmt: skip


def plan(environ: dict[str, str], *, running: str, dirs: list[Path] | None = None,
         platform: str = sys.platform) -> Path | None:  # fmt: skip
    """The library to re-execute with, or None to go on as we are. ``running``: :func:`loaded` of this
    process. Raises :class:`AllocatorError` when the setting names an allocator that cannot be had: not found,
    off Linux, or another allocator already running.

    ``auto`` leaves alone a process that already preloads anything (``LD_PRELOAD`` non-empty: the user's own
    allocator, such as mimalloc, or a sanitizer whose runtime must come first); an allocator named explicitly
    is added after the user's entries."""
    setting = choice(environ)
    if setting == "system" or environ.get(_GUARD):
        return None
    if setting == "auto" and (environ.get("LD_PRELOAD", "").strip() or running != "system"
                              or not platform.startswith("linux")):  # fmt: skip
        return None
    if not platform.startswith("linux"):
        raise AllocatorError(f"{ENV}={setting}: preloading an allocator (LD_PRELOAD) is for Linux, not {platform}; "
                             f"unset {ENV} or set it to system")  # fmt: skip
    if "/" in setting:
        path = Path(setting).resolve()  # absolute: the processes it starts may run elsewhere
        if not path.is_file():
            raise AllocatorError(f"{ENV}={setting}: no such file")
        return path
    name = "jemalloc" if setting == "auto" else setting
    if running != "system":
        if running == name:
            return None
        raise AllocatorError(f"{ENV}={setting}: this process already runs on {running} (LD_PRELOAD)")
    path = find(name, dirs)
    if path is None and setting != "auto":
        package = "libjemalloc2" if setting == "jemalloc" else "libtcmalloc-minimal4"
        where = ", ".join(map(str, search_dirs() if dirs is None else dirs))
        raise AllocatorError(f"{ENV}={setting}: no {LIBRARIES[setting][0]} in {where} (Debian/Ubuntu: apt install "
                             f"{package})")
    return path


def _normlab_is_main() -> bool:
    """Whether this process's main program is normlab's own (``python -m normlab``, the ``normlab`` command), the
    only case where re-executing the command line re-runs normlab and nothing else: not ``python -c``, a script on
    stdin, runpy from a notebook or another tool that calls :func:`normlab.__main__.entry`."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "normlab.__main__":
        return True
    argv0 = sys.argv[0] if sys.argv else ""
    return Path(argv0).name == "normlab" and Path(argv0).is_file()


def _drop_allocator_preloads(environ: os._Environ[str] | dict[str, str]) -> None:
    """Take the allocators (jemalloc, tcmalloc) out of ``LD_PRELOAD``: called where one was inherited and did not
    load (ld.so printed why), so that the processes started from here do not each print the same error."""
    entries = [e for e in environ.get("LD_PRELOAD", "").split(":")
               if e and not any(Path(e).name.startswith(f"lib{n}") for n in LIBRARIES)]  # fmt: skip
    if entries:
        environ["LD_PRELOAD"] = ":".join(entries)
    else:
        environ.pop("LD_PRELOAD", None)


def with_preload(environ: os._Environ[str] | dict[str, str], lib: Path) -> dict[str, str]:
    """A copy of ``environ`` whose ``LD_PRELOAD`` also loads ``lib``, after the entries already there (the user's own
    preload, a sanitizer's runtime, must stay first)."""
    env = dict(environ)
    env["LD_PRELOAD"] = f"{env['LD_PRELOAD']}:{lib}" if env.get("LD_PRELOAD", "").strip() else str(lib)
    return env


def reexec() -> None:
    """Re-execute this process with the chosen allocator preloaded (:func:`plan`), or return. Call it before
    anything large is imported (``python -m normlab`` and the ``normlab`` command do): the process image is
    replaced, its pid, open files and arguments (``sys.orig_argv``: the interpreter's own flags too) kept.

    The re-executed process and every process it starts carry ``_NORMLAB_ALLOCATOR_EXEC``: they do not choose
    again. Where the preloaded library did not load (the re-executed process itself: a warning and no second
    try; a process started elsewhere from an exported environment, as submitit's on another node: it chooses
    afresh), the allocator's entry leaves ``LD_PRELOAD``."""
    running = loaded()
    guard = os.environ.get(_GUARD)
    if guard:
        if running != "system":
            os.environ[_GUARD] = "done"
            return
        _drop_allocator_preloads(os.environ)
        if guard != "done":  # this process is the re-exec, and the library did not load
            sys.stderr.write(f"normlab: warning: {guard} did not load; running on the C library's allocator\n")
            os.environ[_GUARD] = "done"
            return
        del os.environ[_GUARD]  # inherited from a process whose library is not here: choose afresh
    try:
        lib = plan(dict(os.environ), running=running)
    except AllocatorError as e:
        sys.stderr.write(f"normlab: error: {e}\n")
        raise SystemExit(2) from None
    if lib is None or not _normlab_is_main():
        return
    env = {**with_preload(os.environ, lib), _GUARD: str(lib)}
    argv = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv[1:]], env)
