"""A real one-node SLURM on 127.0.0.1: the sbatch script and dask-jobqueue's SLURMCluster.

The fixture writes a ``slurm.conf`` into a temporary folder and starts ``munged`` (as
the munge user, on its own socket), ``slurmctld`` and ``slurmd`` (as root, on free
ports); it stops them afterwards. The tests skip, saying why, only where those daemons
cannot run here (not root, Debian's ``slurm-wlm``/``munge`` missing: ``make test``
installs them through scripts/install-system-packages.sh).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from cli_runs import s3_server

import dpgm
from dpgm.spec import build_model, read_spec

pytestmark = pytest.mark.slow

SBATCH = Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "dpgm-fit.sbatch"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo")


@dataclass
class Slurm:
    root: Path
    env: dict[str, str]

    def run(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("env", self.env)
        result = subprocess.run(list(args), capture_output=True, text=True, timeout=60, **kwargs)
        if result.returncode:
            raise AssertionError(f"{' '.join(args)} exited {result.returncode}: {result.stderr}")
        return result

    def sbatch(self, *args: str | os.PathLike[str], cwd: Path, env: dict[str, str] | None = None) -> str:
        result = self.run("sbatch", "--parsable", *map(str, args), cwd=cwd, env={**self.env, **(env or {})})
        return result.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job`` as a dict (completed jobs stay listed for MinJobAge seconds)."""
        text = self.run("scontrol", "show", "job", "-o", job_id).stdout
        return dict(field.split("=", 1) for field in text.split() if "=" in field)

    def wait(self, job_id: str, timeout: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.job(job_id)
            if job["JobState"] in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}:
                return job
            time.sleep(0.5)
        self.run("scancel", job_id)
        raise AssertionError(f"job {job_id} still {self.job(job_id)['JobState']} after {timeout} s")


def _cannot_run() -> str | None:
    if sys.platform != "linux" or os.geteuid() != 0:
        return "a real SLURM needs root here (munged as the munge user, slurmd as root)"
    missing = [name for name in DAEMONS if shutil.which(name) is None
               and not Path("/usr/sbin", name).exists()]
    if missing:
        return (f"{', '.join(missing)} not installed: install Debian's slurm-wlm and munge "
                "(bash scripts/install-system-packages.sh)")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _daemon(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


SLURM_CONF = """\
ClusterName=dpgmtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also delays a requeued job's restart (default 120 s)
AuthInfo=socket={root}/munge/socket,cred_expire=5
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SchedulerType=sched/backfill
# start a requeued job as soon as it is eligible, not at the next 30-60 s pass
SchedulerParameters=bf_interval=1,sched_interval=2
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=600
DefMemPerCPU=500
SlurmdParameters=config_overrides
NodeName=dpgmnode NodeAddr=127.0.0.1 CPUs=4 RealMemory=16384 State=UNKNOWN
PartitionName=debug Nodes=dpgmnode Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="module")
def slurm():
    reason = _cannot_run()
    if reason:
        pytest.skip(reason)
    # not under pytest's root-only 0700 tmp folder: munged runs as the munge user
    root = Path(tempfile.mkdtemp(prefix="dpgm-slurm-"))
    root.chmod(0o755)
    (root / "state").mkdir()
    (root / "spool").mkdir()
    munge = root / "munge"
    munge.mkdir(mode=0o755)
    keys = root / "munge-key"
    keys.mkdir(mode=0o700)
    key = keys / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o600)
    for path in (munge, keys, key):
        shutil.chown(path, "munge", "munge")
    conf = root / "slurm.conf"
    conf.write_text(SLURM_CONF.format(host=socket.gethostname().split(".")[0], ctld_port=_free_port(),
                                      d_port=_free_port(), root=root))
    env = {**os.environ, "SLURM_CONF": str(conf),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    processes: list[subprocess.Popen] = []
    try:
        processes.append(subprocess.Popen(
            [_daemon("munged"), "--foreground", "--force", f"--socket={munge}/socket", f"--key-file={key}",
             f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log", f"--seed-file={keys}/seed"],
            user="munge", group="munge", stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        _until(lambda: (munge / "socket").exists(), 10, "munged did not create its socket", root)
        with open(root / "slurmctld.out", "w") as out:
            processes.append(subprocess.Popen([_daemon("slurmctld"), "-D", "-f", str(conf)], env=env,
                                              stdout=out, stderr=subprocess.STDOUT))
        with open(root / "slurmd.out", "w") as out:
            processes.append(subprocess.Popen([_daemon("slurmd"), "-D", "-N", "dpgmnode", "-f", str(conf)], env=env,
                                              stdout=out, stderr=subprocess.STDOUT))

        def idle() -> bool:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            return state.stdout.strip() == "idle"

        _until(idle, 30, "the SLURM node did not become idle", root)
        yield Slurm(root, env)
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(root, ignore_errors=True)


def _until(condition, timeout: float, message: str, root: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(root.rglob("*.out"))
                             + sorted(root.rglob("*.log")))
            raise AssertionError(f"{message} within {timeout} s\n{logs}")
        time.sleep(0.2)


# A latent class model whose EM (SQUAREM, the default) converges after 87 iterations (~0.07 s each
# on one worker with a checkpoint on a quiet machine, ~6 s in all; plain EM creeps on for thousands).
LCA = """\
model: latent_class
n_classes: 3
observed: [asia, tub, smoke, lung, bronc, either, xray, dysp]
random_state: 0
max_iter: 500
tol: 1.0e-11
"""


@pytest.fixture(scope="module")
def asia(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slurm-data")
    dpgm.sample_bayesian_network(dpgm.load_network("asia"), 20_000, folder / "asia.zarr", seed=3, chunk_rows=5000)
    return folder / "asia.zarr"


def _shared_folder(slurm: Slurm, name: str) -> Path:
    folder = slurm.root / name
    folder.mkdir()
    return folder


def _assert_same_model(path: Path, expected) -> None:
    fitted = dpgm.load(path)
    for variable, cpd in expected.cpds.items():
        np.testing.assert_array_equal(fitted.cpds[variable].values, cpd.values, err_msg=variable)


def _wait_for_line(path: Path, pattern: str, job_id: str, slurm: Slurm, timeout: float) -> re.Match:
    """The first match of ``pattern`` in the job's log, waiting for it (while the job lives)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(pattern, path.read_text()) if path.exists() else None
        if found:
            return found
        if slurm.job(job_id)["JobState"] in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}:
            break
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} in the job's log:\n" + (path.read_text()[-3000:] if path.exists() else ""))


def _job_logs(folder: Path) -> str:
    logs = [folder / "job.out", *sorted(folder.glob("dpgm-*/run-*/*.log"))]
    return "\n".join(f"--- {p}\n{p.read_text()[-3000:]}" for p in logs if p.exists())


def test_sbatch_job_stops_before_its_time_limit(slurm, asia):
    """The script's timer reads the job's end time from Slurm and stops the fit DPGM_STOP_BEFORE_END
    seconds before it: a fit that would run for ever (tol 1e-300) stops with exit 75 well before Slurm's
    own kill at two minutes (which would leave the job TIMEOUT), and without --checkpoint it says it
    does not requeue."""
    folder = _shared_folder(slurm, "time-limit")
    spec = folder / "lca.yaml"
    spec.write_text(LCA.replace("max_iter: 500", "max_iter: 1000000").replace("tol: 1.0e-11", "tol: 1.0e-300"))
    job_id = slurm.sbatch("--time=2", "--ntasks=2", "--output", folder / "job.out", SBATCH, spec, asia,
                          folder / "model.zarr", cwd=folder, env={"DPGM_STOP_BEFORE_END": "90"})
    job = slurm.wait(job_id, timeout=240)
    log = (folder / "job.out").read_text()
    assert job["JobState"] == "FAILED" and job["ExitCode"] == "75:0", _job_logs(folder)
    assert "time limit near" in log and "no --checkpoint: nothing to resume from; not requeued" in log, log
    assert int(job["Restarts"]) == 0, log
    assert not (folder / "model.zarr").exists()


@pytest.mark.parametrize("store", ["folder", "s3"])
def test_sbatch_job_requeues_at_time_limit_and_resumes_to_the_same_fit(slurm, asia, store):
    """Told the time limit is near (USR1 to the batch shell, as the timer above does), the script stops
    the fit, exits 75 and requeues the job; the next allocation resumes from the checkpoint and ends with
    the fit of an uninterrupted run. The test sends the signal once the fit is past iteration 10, so the
    stop falls mid-fit however fast or loaded the machine. The checkpoint is a shared folder, or an
    ``s3://`` URL on an S3-compatible server (moto, on the node's loopback) with ``--storage-options``."""
    folder = _shared_folder(slurm, f"requeue-{store}")
    with contextlib.ExitStack() as stack:
        if store == "s3":
            options = stack.enter_context(s3_server("requeue"))
            checkpoint = ["--checkpoint", "s3://requeue/checkpoint", "--storage-options", json.dumps(options)]
        else:
            checkpoint = ["--checkpoint", folder / "checkpoint"]
        _requeue_and_resume(slurm, asia, folder, checkpoint)


def _requeue_and_resume(slurm, asia, folder: Path, checkpoint: list) -> None:
    spec = folder / "lca.yaml"
    spec.write_text(LCA)
    # the same fit uninterrupted (in this process, no checkpoint; before the job, not to slow it)
    ds = dpgm.open_dataset(asia)
    model, method, options = build_model(read_spec(spec), dpgm.Schema.from_dataset(ds).states)
    expected = dpgm.fit(model, ds, method=method, **options)
    assert expected.converged and expected.n_iter > 20, expected  # SQUAREM's count depends on the machine's rounding
    start = time.monotonic()
    # two tasks: the scheduler and one worker
    job_id = slurm.sbatch("--time=10", "--ntasks=2", "--output", folder / "job.out", SBATCH, spec, asia,
                          folder / "model.zarr", *checkpoint, cwd=folder)
    _wait_for_line(folder / "job.out", r"dpgm: iteration 1\d ", job_id, slurm, timeout=300)
    slurm.run("scancel", "--batch", "--signal=USR1", job_id)
    try:
        job = slurm.wait(job_id, timeout=480)
    except AssertionError as error:  # show what the job did: its log and its steps' logs
        raise AssertionError(f"{error}\n{_job_logs(folder)}") from error
    elapsed = time.monotonic() - start
    log = (folder / "job.out").read_text()
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", _job_logs(folder)
    assert int(job["Restarts"]) == 1, log
    stopped, resumed = log.split("dpgm-fit.sbatch: exit 75")
    assert "time limit near" in stopped and f"requeued job {job_id}" in stopped, log
    assert "resuming from the checkpoint" in resumed, log
    # the first allocation got some way, the next went on from there (not from 1)
    first_last = max(int(i) for i in re.findall(r"dpgm: iteration (\d+) ", stopped))
    second_first = min(int(i) for i in re.findall(r"dpgm: iteration (\d+) ", resumed))
    assert 10 <= first_last < expected.n_iter and second_first > 1, (first_last, second_first)
    _assert_same_model(folder / "model.zarr", expected.model)
    # every allocation: scheduler, worker and dashboards on the node's address, free ports
    for run in range(int(job["Restarts"]) + 1):
        logs = folder / f"dpgm-{job_id}" / f"run-{run}"
        address = json.loads((logs / "scheduler.json").read_text())["address"]
        assert re.fullmatch(r"tcp://127\.0\.0\.1:\d+", address) and not address.endswith(":8786")
        scheduler_log, workers_log = (logs / "scheduler.log").read_text(), (logs / "workers.log").read_text()
        assert re.search(r"dashboard at:\s+http://127\.0\.0\.1:\d+", scheduler_log), scheduler_log
        assert re.search(r"Start worker at:\s+tcp://127\.0\.0\.1:\d+", workers_log), workers_log
        assert re.search(r"dashboard at:\s+127\.0\.0\.1:\d+", workers_log), workers_log
    print(f"requeue: first stop after iteration {first_last}, resumed at {second_first}, {elapsed:.0f} s in all")


def test_sbatch_job_fails_fast_when_the_scheduler_step_dies(slurm, asia):
    folder = _shared_folder(slurm, "dead-scheduler")
    spec = folder / "bn.yaml"
    spec.write_text("model: bayesian_network\nnetwork: asia\n")
    start = time.monotonic()
    # no such interface: the scheduler (and worker) steps exit at once
    env = {**slurm.env, "DPGM_DASK_INTERFACE": "nosuch0"}
    job_id = subprocess.run(["sbatch", "--parsable", "--output", str(folder / "job.out"), str(SBATCH),
                             str(spec), str(asia), str(folder / "model.zarr")], env=env, cwd=folder,
                            capture_output=True, text=True, check=True).stdout.strip()
    job = slurm.wait(job_id, timeout=60)
    log = (folder / "job.out").read_text()
    assert job["ExitCode"] == "69:0", log
    assert "step ended" in log, log
    assert time.monotonic() - start < 40
    assert not (folder / "model.zarr").exists()


def test_jobqueue_slurm_cluster_submits_workers_with_dpgm_environment(slurm, asia, monkeypatch):
    """``dpgm.connect(cluster="slurm")``: workers are sbatch jobs carrying dpgm's worker environment."""
    folder = _shared_folder(slurm, "jobqueue")
    monkeypatch.setenv("SLURM_CONF", slurm.env["SLURM_CONF"])
    monkeypatch.setenv("PATH", slurm.env["PATH"])
    truth = dpgm.load_network("asia")
    # a worker holds ~400 MiB once dpgm and its compiled kernels are loaded: under 500 MiB it would pause at 80 %
    options = {"memory": "2GiB", "walltime": "00:10:00", "log_directory": str(folder)}
    with dpgm.connect(cluster="slurm", jobs=2, timeout=60, cluster_options=options) as client:
        client.wait_for_workers(2, timeout=60)
        environments = client.run(lambda: {k: os.environ.get(k) for k in ("MALLOC_MMAP_THRESHOLD_",
                                                                           "SLURM_JOB_ID")})
        queue = slurm.run("squeue", "-h", "-o", "%i %j %T").stdout.split("\n")
        fitted = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), dpgm.open_dataset(asia), client=client).model
    assert len(environments) == 2
    assert {env["MALLOC_MMAP_THRESHOLD_"] for env in environments.values()} == {"268435456"}
    job_ids = {env["SLURM_JOB_ID"] for env in environments.values()}
    assert len(job_ids) == 2 and all(any(line.startswith(f"{j} ") for line in queue) for j in job_ids), queue
    expected = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), dpgm.open_dataset(asia)).model
    for variable, cpd in expected.cpds.items():
        np.testing.assert_array_equal(fitted.cpds[variable].values, cpd.values)


def test_cli_fit_on_jobqueue_slurm_cluster(slurm, asia):
    folder = _shared_folder(slurm, "jobqueue-cli")
    spec = folder / "bn.yaml"
    spec.write_text("model: bayesian_network\nnetwork: asia\n")
    env = {**slurm.env, "DASK_JOBQUEUE__SLURM__MEMORY": "2GiB", "DASK_JOBQUEUE__SLURM__WALLTIME": "00:10:00",
           "DASK_JOBQUEUE__SLURM__LOG_DIRECTORY": str(folder)}
    result = subprocess.run([sys.executable, "-m", "dpgm.cli", "fit", str(spec), str(asia), "--out",
                             str(folder / "model.zarr"), "--cluster", "slurm", "--jobs", "2",
                             "--connect-timeout", "60"], env=env, cwd=folder, capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0, result.stderr
    assert list(folder.glob("slurm-*.out")) or list(folder.glob("dask-worker*.out")), sorted(folder.iterdir())
    truth = dpgm.load_network("asia")
    _assert_same_model(folder / "model.zarr", dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), dpgm.open_dataset(asia)).model)


def test_two_sbatch_jobs_on_one_node_run_side_by_side_on_free_ports(slurm, asia):
    """Two dpgm jobs on the same node at once (fixed ports made the second wait for a scheduler that
    had died): both finish, each with its own scheduler, and both write the closed-form fit."""
    jobs = {}
    for name in ("first", "second"):
        folder = _shared_folder(slurm, f"side-by-side-{name}")
        spec = folder / "bn.yaml"
        spec.write_text("model: bayesian_network\nnetwork: asia\n")
        jobs[name] = folder, slurm.sbatch("--ntasks=2", "--output", folder / "job.out", SBATCH, spec, asia,
                                          folder / "model.zarr", cwd=folder)
    finished = {name: slurm.wait(job_id, timeout=180) for name, (_, job_id) in jobs.items()}
    for name, job in finished.items():
        assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", (jobs[name][0] / "job.out").read_text()
    first, second = finished["first"], finished["second"]
    assert first["StartTime"] < second["EndTime"] and second["StartTime"] < first["EndTime"]  # they overlapped
    addresses = {json.loads((folder / f"dpgm-{job_id}" / "run-0" / "scheduler.json").read_text())["address"]
                 for folder, job_id in jobs.values()}
    assert len(addresses) == 2 and not any(a.endswith(":8786") for a in addresses), addresses
    # oracle: the maximum-likelihood CPDs are the data's conditional frequencies (pandas)
    frame = dpgm.to_pandas(dpgm.open_dataset(asia).load())
    truth = dpgm.load_network("asia")
    for folder, _ in jobs.values():
        fitted = dpgm.load(folder / "model.zarr")
        for variable in truth.variables:
            parents = list(fitted.parents(variable))
            cpd = fitted.cpds[variable].transpose(variable, *parents)
            counts = frame.groupby(parents + [variable], observed=False).size() if parents else \
                frame[variable].value_counts()
            for index, count in counts.items():
                key = dict(zip([*parents, variable], index if parents else [index], strict=True))
                total = counts.loc[index[:-1]].sum() if parents else counts.sum()
                if total == 0:  # a parent configuration never seen: no data to compare with
                    continue
                assert float(cpd.sel(key)) == pytest.approx(count / total, rel=1e-12, abs=1e-15), (variable, key)
