"""A private single-node SLURM cluster for the launcher tests: slurmctld and slurmd of Debian's ``slurm-wlm``
(``apt-get install slurmctld slurmd slurm-client``), started from a config in a temporary directory, on free
ports, without systemd, munge or accounting (``auth/none``: the daemons trust this machine's own user, which is
all a test cluster on one machine needs). ``start`` returns the environment (``SLURM_CONF``) that makes sbatch,
squeue and scancel talk to it, or raises :class:`Unavailable` saying why it cannot run here."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


class Unavailable(RuntimeError):
    pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(root: Path) -> tuple[dict[str, str], list[subprocess.Popen]]:
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    if missing:
        raise Unavailable(f"{', '.join(missing)} not on PATH (Debian: apt-get install slurmctld slurmd slurm-client)")
    root.mkdir(parents=True, exist_ok=True)
    for d in ("state", "spool", "log"):
        (root / d).mkdir(exist_ok=True)
    host = socket.gethostname().split(".")[0]
    user = getpass.getuser()
    conf = root / "slurm.conf"
    conf.write_text(f"""ClusterName=normlab-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/none
CredType=cred/none
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
""", encoding="utf-8")
    env = dict(os.environ, SLURM_CONF=str(conf))
    # -D: in the foreground, as our children (no systemd here); -i: ignore any state of an earlier cluster
    procs = [subprocess.Popen(["slurmctld", "-D", "-i"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.STDOUT),
             subprocess.Popen(["slurmd", "-D"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)]
    deadline = time.monotonic() + 60  # seconds on an idle machine; `make test` runs other test files beside it
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip() in ("idle", "mix", "alloc"):
            return {"SLURM_CONF": str(conf)}, procs
        if any(p.poll() is not None for p in procs):
            break
        time.sleep(0.3)
    stop(procs)
    log = "".join((root / "log" / f).read_text(errors="replace")[-600:] for f in ("slurmctld.log", "slurmd.log")
                  if (root / "log" / f).exists())  # fmt: skip
    raise Unavailable(f"the single-node cluster did not come up within 20 s: {' | '.join(log.splitlines()[-4:])}")


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
