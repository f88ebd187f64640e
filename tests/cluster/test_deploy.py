"""deploy/ and connecting to clusters: launchers use the current dask commands and free
ports, the local scripts run real processes, and every command that connects fails fast
(exit 69, one line) instead of waiting silently."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

import dpgm
from dpgm.cli import cli
from dpgm.cluster import NoWorkers, SchedulerUnreachable, job_script

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BIN = Path(sys.executable).parent
SCRIPTS = [p for p in DEPLOY.rglob("*") if p.is_file() and (p.suffix in {".sh", ".sbatch", ".yaml", ".yml"}
                                                             or p.name == "Dockerfile")]


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    return {**env, "PATH": f"{BIN}:{os.environ['PATH']}", "PYTHONUNBUFFERED": "1", **extra}


def _text(path: Path) -> str:
    """The file, plus each container's args/command of a manifest joined into one line."""
    text = path.read_text()
    if path.suffix in {".yaml", ".yml"}:
        def walk(node):
            if isinstance(node, dict):
                for key, value in node.items():
                    if key in {"args", "command"} and isinstance(value, list):
                        yield " ".join(map(str, value))
                    yield from walk(value)
            elif isinstance(node, list):
                for value in node:
                    yield from walk(value)

        text += "\n" + "\n".join(line for doc in yaml.safe_load_all(text) for line in walk(doc))
    return text


def test_launchers_use_current_dask_commands():
    assert len(SCRIPTS) >= 5
    for path in SCRIPTS:
        text = _text(path)
        assert not re.search(r"dask-(scheduler|worker)\b", text), path
        assert re.search(r"\bdask (scheduler|worker)\b", text) or "dask" not in text, path


def test_every_launched_scheduler_serves_the_dpgm_page():
    launches = [(path, line) for path in SCRIPTS for line in _text(path).replace("\\\n", " ").splitlines()
                if re.search(r"\bdask scheduler\b", line) and not line.lstrip().startswith("#")
                and "--help" not in line]
    assert {path.parent.name for path, _ in launches} >= {"local", "slurm", "kubernetes"}, launches
    for path, line in launches:
        assert "--preload dpgm.dashboard" in line, (path, line)


def test_launchers_use_free_ports_and_do_not_listen_everywhere():
    for path in SCRIPTS:
        text = _text(path)
        if path.parent.name != "kubernetes":  # per-pod ports there: the operator's convention
            assert not re.search(r"\b878[67]\b", text), path
        for command in re.findall(r"dask (?:scheduler|worker)[^\n]*", text.replace("\\\n", " ")):
            assert "--host" in command or "--interface" in command or "dask_listen" in command \
                or path.parent.name == "kubernetes", (path, command)


def test_sbatch_steps_take_only_their_cpus():
    """Since Slurm 21.08 a step without --exact (or --overlap) waits for the whole allocation."""
    text = (DEPLOY / "slurm" / "dpgm-fit.sbatch").read_text()
    steps = re.findall(r"^\s*srun\b[^\n]*", text, flags=re.MULTILINE)
    assert len(steps) == 2
    for step in steps:
        assert "--exact" in step or "--overlap" in step, step
        assert "--exclusive" not in step, step
    assert "#SBATCH --requeue" in text and "exit 75" in text and "kill 0" not in text
    subprocess.run(["bash", "-n", DEPLOY / "slurm" / "dpgm-fit.sbatch"], check=True)


def test_sbatch_finds_a_checkpoint_written_by_dpgm_fit_through_its_url(tmp_path):
    """``has_checkpoint`` (which decides whether a requeued job resumes) imports dpgm's checkpoint reader for a
    URL: run as the script defines it, on a checkpoint a real fit wrote and on an empty folder."""
    import pandas as pd

    text = (DEPLOY / "slurm" / "dpgm-fit.sbatch").read_text()
    function = re.search(r"^has_checkpoint\(\) \{.*?^\}", text, flags=re.MULTILINE | re.DOTALL).group(0)
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x0": rng.normal(size=300), "x1": rng.normal(size=300)})
    with pytest.warns(dpgm.ConvergenceWarning):
        dpgm.fit(dpgm.GaussianMixture(2, ["x0", "x1"]), dpgm.from_pandas(frame), max_iter=2,
                 checkpoint=str(tmp_path / "ck"))
    (tmp_path / "empty").mkdir()
    codes = {}
    for name, where in {"url": f"file://{tmp_path / 'ck'}", "path": str(tmp_path / "ck"),
                        "empty url": f"file://{tmp_path / 'empty'}", "empty path": str(tmp_path / "empty")}.items():
        codes[name] = subprocess.run(["bash", "-c", f'{function}\nhas_checkpoint "$1"', "-", where],
                                     env=_environment(), timeout=120).returncode
    assert codes == {"url": 0, "path": 0, "empty url": 1, "empty path": 1}


# ---------------------------------------------------------------- deploy/local


def _local(tmp_path: Path, script: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = _environment(DPGM_CLUSTER_DIR=str(tmp_path / "cluster"))
    return subprocess.run([DEPLOY / "local" / script, *args], env=env, timeout=120, capture_output=True, text=True,
                          check=check)


def _group(pid_file: Path) -> list[int]:
    pid = int(pid_file.read_text().split()[0])
    found = subprocess.run(["pgrep", "-g", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


@pytest.mark.slow
def test_local_cluster_scripts_run_a_real_fit_on_loopback(tmp_path):
    started = _local(tmp_path, "start-cluster.sh", "2")
    folder = tmp_path / "cluster"
    try:
        assert "scheduler: tcp://127.0.0.1:" in started.stdout
        again = _local(tmp_path, "start-cluster.sh", "2", check=False)
        assert again.returncode == 1 and "already running" in again.stderr
        pids = _group(folder / "scheduler.pid") + _group(folder / "workers.pid")
        assert len(pids) >= 4  # scheduler; worker parent, 2 nannies, 2 workers
        listening = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
        ours = [line.split()[3] for line in listening.splitlines()
                if any(f"pid={pid}," in line for pid in pids)]
        assert len(ours) >= 6 and all(address.startswith("127.0.0.1:") for address in ours), ours
        assert not any(address.endswith((":8786", ":8787")) for address in ours)

        truth = dpgm.load_network("asia")
        ds = dpgm.sample_bayesian_network(truth, 4000, tmp_path / "a.zarr", seed=3, chunk_rows=1000)
        spec = tmp_path / "spec.yaml"
        spec.write_text("model: bayesian_network\nnetwork: asia\n")
        subprocess.run([sys.executable, "-m", "dpgm.cli", "fit", spec, tmp_path / "a.zarr", "--out",
                        tmp_path / "m.zarr", "--scheduler-file", folder / "scheduler.json"], env=_environment(),
                       check=True, timeout=180, capture_output=True)
        fitted = dpgm.load(tmp_path / "m.zarr")
        expected = dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), ds).model
        for v in truth.variables:
            np.testing.assert_array_equal(fitted.cpds[v].values, expected.cpds[v].values)

        # an iterative fit on the same cluster appears, every iteration, on the dashboard's /dpgm page
        cycle = [["asia", "tub"], ["tub", "either"], ["either", "lung"], ["lung", "smoke"], ["smoke", "asia"]]
        (tmp_path / "ipf.yaml").write_text(json.dumps({"model": "markov_network", "cliques": cycle,
                                                        "method": "ipf", "tol": 1e-9}))
        subprocess.run([sys.executable, "-m", "dpgm.cli", "fit", tmp_path / "ipf.yaml", tmp_path / "a.zarr", "--out",
                        tmp_path / "ipf.zarr", "--scheduler-file", folder / "scheduler.json"], env=_environment(),
                       check=True, timeout=180, capture_output=True)
        port = json.loads((folder / "scheduler.json").read_text())["services"]["dashboard"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/dpgm/data.json", timeout=10) as response:
            (fit,) = json.loads(response.read())["fits"]
        states = {v: truth.states[v] for v in truth.variables}
        again = dpgm.fit(dpgm.MarkovNetwork.from_cliques([tuple(c) for c in cycle], states), ds, method="ipf",
                         tol=1e-9)
        assert fit["method"] == "ipf" and fit["status"] == "converged" and fit["n_iter"] == again.n_iter
        (restart,) = fit["restarts"]
        np.testing.assert_allclose(restart["loglik"], [h["loglik"] for h in again.history], rtol=1e-12)
    finally:
        stopped = _local(tmp_path, "stop-cluster.sh")
    # stop returns only once every process it started has exited
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()
                and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]], stopped.stderr
    assert not list(folder.glob("*.pid")) and not (folder / "scheduler.json").exists()


def test_local_stop_leaves_a_process_that_reused_a_recorded_pid_alone(tmp_path):
    folder = tmp_path / "cluster"
    folder.mkdir()
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        # a stale pid file naming a live process that start-cluster.sh did not start (other start time)
        (folder / "workers.pid").write_text(f"{other.pid} 1\n")
        result = _local(tmp_path, "stop-cluster.sh")
        assert other.poll() is None, "stop-cluster.sh killed a process it did not start"
        assert "not touched" in result.stderr
        assert not (folder / "workers.pid").exists()
    finally:
        other.kill()
        other.wait()


# ------------------------------------------------------- connecting fails fast


@pytest.fixture(scope="module")
def fitted_asia(tmp_path_factory):
    folder = tmp_path_factory.mktemp("connect")
    truth = dpgm.load_network("asia")
    ds = dpgm.sample_bayesian_network(truth, 2000, folder / "a.zarr", seed=1, chunk_rows=500)
    dpgm.fit(dpgm.BayesianNetwork.from_edges(truth.edges), ds).model.save(folder / "model.zarr")
    (folder / "spec.yaml").write_text("model: bayesian_network\nnetwork: asia\n")
    (folder / "a.csv").write_text("smoke,lung\nyes,no\nno,no\n")
    return folder


COMMANDS = {
    "generate": lambda f: ["generate", "asia", str(f / "new.zarr"), "--rows", "100"],
    "counts": lambda f: ["counts", str(f / "a.zarr"), "--scope", "asia"],
    "convert": lambda f: ["convert", str(f / "a.csv"), str(f / "converted.zarr")],
    "fit": lambda f: ["fit", str(f / "spec.yaml"), str(f / "a.zarr"), "--out", str(f / "out.zarr")],
    "predict": lambda f: ["predict", str(f / "model.zarr"), str(f / "a.zarr"), "--variable", "lung"],
    "demo": lambda f: ["demo", "--rows", "100"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_exits_69_when_no_scheduler_file_appears(command, fitted_asia, tmp_path, monkeypatch):
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    start = time.monotonic()
    result = CliRunner().invoke(cli, [*COMMANDS[command](fitted_asia), "--scheduler-file",
                                      str(tmp_path / "missing.json"), "--connect-timeout", "0.5"])
    assert result.exit_code == 69, result.output
    message = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(message) == 1 and "missing.json" in message[0] and "--connect-timeout" in message[0]
    assert time.monotonic() - start < 10
    assert not (fitted_asia / "new.zarr").exists() and not (fitted_asia / "out.zarr").exists()


@pytest.fixture
def lone_scheduler(tmp_path):
    """A real `dask scheduler` process without workers."""
    file = tmp_path / "scheduler.json"
    process = subprocess.Popen([BIN / "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                                "--dashboard-address", "127.0.0.1:0", "--scheduler-file", file],
                               env=_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        yield process, file
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_connect_refuses_a_scheduler_no_worker_joins(lone_scheduler):
    _, file = lone_scheduler
    start = time.monotonic()
    with pytest.raises(NoWorkers, match=r"no Dask worker joined the scheduler at tcp://127\.0\.0\.1:\d+ .* 1 s"):
        with dpgm.connect(scheduler_file=str(file), timeout=1):
            pass
    assert time.monotonic() - start < 5


def test_cli_exits_69_when_no_worker_joins(lone_scheduler, fitted_asia):
    _, file = lone_scheduler
    address = json.loads(file.read_text())["address"]
    result = subprocess.run([sys.executable, "-m", "dpgm.cli", "counts", fitted_asia / "a.zarr", "--scope", "asia",
                             "--connect-timeout", "1"], env=_environment(DASK_SCHEDULER_ADDRESS=address),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 69
    assert result.stderr.strip().splitlines()[-1].startswith("Error: no Dask worker joined")


def test_connect_to_an_unreachable_address_fails_fast():
    start = time.monotonic()
    with pytest.raises(SchedulerUnreachable, match="no Dask scheduler answered at tcp://127.0.0.1:9"):
        with dpgm.connect("tcp://127.0.0.1:9", timeout=1):
            pass
    assert time.monotonic() - start < 5


def test_connect_honours_dask_scheduler_address_config(client):
    import dask

    with dask.config.set({"scheduler-address": client.scheduler.address}):
        with dpgm.connect(timeout=10) as connected:
            assert connected.scheduler.address == client.scheduler.address
            assert connected is not client


def test_connect_validates_cluster_and_jobs():
    with pytest.raises(ValueError, match=r"unknown cluster 'kubernetes'; known: \['local', 'slurm', 'pbs'\]"):
        with dpgm.connect(cluster="kubernetes"):
            pass
    with pytest.raises(ValueError, match="jobs=3 needs cluster="):
        with dpgm.connect(jobs=3):
            pass
    with pytest.raises(ValueError, match="timeout must be a positive"):
        with dpgm.connect(timeout=0):
            pass


@pytest.mark.slow
def test_fit_exits_69_when_the_scheduler_dies_mid_fit(lone_scheduler, fitted_asia, tmp_path):
    scheduler, file = lone_scheduler
    worker = subprocess.Popen([BIN / "dask", "worker", "--scheduler-file", file, "--nthreads", "1", "--host",
                               "127.0.0.1", "--no-dashboard", "--local-directory", tmp_path],
                              env=_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    spec = tmp_path / "lca.yaml"
    spec.write_text("model: latent_class\nn_classes: 3\nrandom_state: 0\nmax_iter: 100000\ntol: 0\n")
    fit = subprocess.Popen([sys.executable, "-m", "dpgm.cli", "fit", spec, fitted_asia / "a.zarr", "--out",
                            tmp_path / "m.zarr", "--scheduler-file", file, "--connect-timeout", "3"],
                           env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(120, fit.kill)
    watchdog.start()
    try:
        output = []
        for line in fit.stdout:
            output.append(line)
            if "dpgm: iteration 5 " in line:
                scheduler.send_signal(signal.SIGKILL)
                killed = time.monotonic()
                break
        output += fit.stdout.readlines()
        assert fit.wait() == 69, "".join(output)
        assert time.monotonic() - killed < 20
        assert re.match(r"Error: .*scheduler.*(went away|lost)", output[-1]), "".join(output)
    finally:
        watchdog.cancel()
        fit.kill()
        fit.wait()
        worker.terminate()
        worker.wait(timeout=30)


# ------------------------------------------------------------- dask-jobqueue


@pytest.mark.parametrize("cluster", ["slurm", "pbs"])
def test_jobqueue_job_script_carries_the_worker_environment(cluster):
    script = job_script(cluster, walltime="01:00:00", memory="2GiB")
    assert "export MALLOC_MMAP_THRESHOLD_=268435456" in script
    assert "export OMP_NUM_THREADS=1" in script
    assert sys.executable in script and "dask_worker" in script and "--nthreads 1" in script
    assert ("#SBATCH" if cluster == "slurm" else "#PBS") in script


def test_jobqueue_keeps_a_configured_prologue():
    import dask

    with dask.config.set({"jobqueue.slurm.job-script-prologue": ["module load python"]}):
        script = job_script("slurm")
    assert script.index("module load python") < script.index("export MALLOC_MMAP_THRESHOLD_")


# ---------------------------------------------------------------- Kubernetes


def _crd_schema() -> dict:
    """The DaskJob CRD's openAPIV3Schema: an installed dask-kubernetes', else the vendored copy."""
    import gzip

    try:
        from importlib.resources import files

        text = (files("dask_kubernetes") / "operator" / "deployment" / "helm" / "dask-kubernetes-operator"
                / "crds" / "daskjob.yaml").read_text()
    except (ImportError, OSError):
        text = gzip.decompress((DEPLOY / "kubernetes" / "crd" / "daskjob.yaml.gz").read_bytes()).decode()
    crd = yaml.safe_load(text)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = version["schema"]["openAPIV3Schema"]
    schema["properties"] |= {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                             "metadata": {"type": "object"}}
    return _strict(schema)


def _strict(schema):
    """Unknown fields are errors (as with ``kubectl apply --validate=strict``), not pruned silently."""
    if isinstance(schema, dict):
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
        for value in schema.values():
            _strict(value)
    elif isinstance(schema, list):
        for value in schema:
            _strict(value)
    return schema


def _daskjob() -> dict:
    documents = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "dpgm-fit-daskjob.yaml").read_text()))
    (job,) = [d for d in documents if d["kind"] == "DaskJob"]
    return job


def test_daskjob_manifest_is_valid_against_the_operator_crd():
    import jsonschema

    validator = jsonschema.Draft7Validator(_crd_schema())
    manifest = _daskjob()
    assert manifest["apiVersion"] == "kubernetes.dask.org/v1"
    validator.validate(manifest)
    # and the check bites: a wrong type and a misspelt field are refused
    for path, value in [(("spec", "cluster", "spec", "worker", "replicas"), "four"),
                        (("spec", "cluster", "spec", "worker", "replica"), 4),
                        (("spec", "job", "spec", "containers", 0, "arg"), ["dpgm"])]:
        broken = json.loads(json.dumps(manifest))
        target = broken
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        assert not validator.is_valid(broken), path


def test_daskjob_manifest_runs_dpgm_fit_with_current_dask_commands():
    manifest = _daskjob()
    (job,) = manifest["spec"]["job"]["spec"]["containers"]
    assert job["args"][:2] == ["dpgm", "fit"] and "--connect-timeout" in job["args"]
    cluster = manifest["spec"]["cluster"]["spec"]
    (scheduler,) = cluster["scheduler"]["spec"]["containers"]
    (worker,) = cluster["worker"]["spec"]["containers"]
    assert scheduler["args"][:2] == ["dask", "scheduler"] and worker["args"][:2] == ["dask", "worker"]
    assert len({job["image"], scheduler["image"], worker["image"]}) == 1  # one dpgm version everywhere
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert env["MALLOC_MMAP_THRESHOLD_"] == "268435456"
    selector = cluster["scheduler"]["service"]["selector"]
    assert selector["dask.org/cluster-name"] == manifest["metadata"]["name"]


def test_dockerfile_pins_its_base_and_installs_dpgm():
    """The Dockerfile's content (the build itself: test_container_image_builds_and_its_dpgm_runs)."""
    text = (DEPLOY / "kubernetes" / "Dockerfile").read_text()
    (base,) = re.findall(r"^FROM\s+(\S+)", text, flags=re.MULTILINE)
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base), base  # exact release
    assert re.search(r"^COPY dpgm \./dpgm$", text, flags=re.MULTILINE)
    assert re.search(r"^RUN pip install \. ", text, flags=re.MULTILINE)
    assert "dask scheduler --help" in text and "dask worker --help" in text
    assert re.search(r"^USER 1000$", text, flags=re.MULTILINE)
    assert "MALLOC_MMAP_THRESHOLD_=268435456" in text



def _buildah(storage: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(["buildah", "--storage-driver", "vfs", "--root", str(storage / "root"),
                           "--runroot", str(storage / "run"), *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_container_image_builds_and_its_dpgm_runs(tmp_path):
    """Build deploy/kubernetes/Dockerfile for real with buildah (no daemon: vfs storage, chroot
    isolation) and run `dpgm --help` in the image; its help equals this checkout's."""
    import shutil

    if shutil.which("buildah") is None:
        pytest.skip("buildah is not installed (scripts/install-system-packages.sh installs it as root)")
    dockerfile = DEPLOY / "kubernetes" / "Dockerfile"
    (base,) = re.findall(r"^FROM\s+(\S+)", dockerfile.read_text(), flags=re.MULTILINE)
    pulled = _buildah(tmp_path, "pull", "--quiet", base, timeout=900)
    if pulled.returncode != 0:
        # the one step that needs a container registry: say exactly why it failed
        failure = (pulled.stderr.strip().splitlines() or ["(no message)"])[-1]
        pytest.skip(f"the base image {base} cannot be pulled from any registry here: {failure}")
    tag = f"localhost/dpgm-test:{os.getpid()}"
    built = _buildah(tmp_path, "bud", "--isolation", "chroot", "--network", "host", "-f", str(dockerfile),
                     "-t", tag, str(DEPLOY.parent))
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    container = _buildah(tmp_path, "from", "--quiet", tag).stdout.strip()
    try:
        inside = _buildah(tmp_path, "run", "--isolation", "chroot", container, "--", "dpgm", "--help", timeout=300)
        user = _buildah(tmp_path, "run", "--isolation", "chroot", container, "--", "id", "-u", timeout=300)
    finally:
        _buildah(tmp_path, "rm", container, timeout=300)
    assert inside.returncode == 0, inside.stderr
    here = subprocess.run([str(BIN / "dpgm"), "--help"], capture_output=True, text=True, env=_environment(),
                          timeout=120)
    assert here.returncode == 0, here.stderr
    assert inside.stdout == here.stdout  # the image's dpgm is this checkout's
    assert user.stdout.strip() == "1000"  # non-root, as the Dockerfile says
