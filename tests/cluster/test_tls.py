"""TLS end to end, and a cluster that is private by default.

Certificates are generated for each test (``certificates.tls_files``: a CA and a certificate for
127.0.0.1). Oracles: the counts of a NumPy cross-tabulation of the stored codes, the addresses distributed
reports (``tls://``), the exit codes of ``docs/exit-codes.md``, and the sockets the operating system lists
as listening (psutil).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from certificates import dask_tls_arguments, tls_files
from cli_runs import error_line, run_dpgm
from dask_processes import dask_processes

import dpgm
from dpgm.cluster import connect


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    ds = dpgm.sample_bayesian_network(dpgm.load_network("asia"), 3000, folder / "asia.zarr", seed=2, chunk_rows=1000)
    smoke, lung = ds["smoke"].values, ds["lung"].values
    expected = [[int(np.sum((smoke == i) & (lung == j))) for j in range(2)] for i in range(2)]
    return folder / "asia.zarr", expected


def _counts(result) -> list[list[int]]:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["tables"]["smoke,lung"]["counts"]


def test_the_embedded_cluster_speaks_tls_when_given_certificates(tmp_path, store):
    from distributed.security import Security

    files = tls_files(tmp_path / "tls")
    security = Security(tls_ca_file=str(files["ca"]), tls_client_cert=str(files["cert"]),
                        tls_client_key=str(files["key"]), tls_scheduler_cert=str(files["cert"]),
                        tls_scheduler_key=str(files["key"]), tls_worker_cert=str(files["cert"]),
                        tls_worker_key=str(files["key"]), require_encryption=True)
    with connect(n_workers=1, security=security) as client:
        assert client.scheduler.address.startswith("tls://127.0.0.1:")
        assert all(w.startswith("tls://") for w in client.scheduler_info()["workers"])
        table = dpgm.counts(dpgm.open_dataset(store[0]), [("smoke", "lung")], client=client)[("smoke", "lung")]
    assert table.values.tolist() == store[1]
    cli = run_dpgm("counts", store[0], "--scope", "smoke,lung", "--json", "--workers", "1",
                   *dask_tls_arguments(files), own_cluster=True)
    assert _counts(cli) == store[1]


def test_dask_processes_over_tls_with_the_cli_options_and_with_dasks_configuration(tmp_path, store):
    files = tls_files(tmp_path / "tls")
    with dask_processes(tmp_path, 1, tls=files) as scheduler_file:
        address = json.loads(scheduler_file.read_text())["address"]
        assert address.startswith("tls://127.0.0.1:")
        given = run_dpgm("counts", store[0], "--scope", "smoke,lung", "--json", "--scheduler-file", scheduler_file,
                         *dask_tls_arguments(files), own_cluster=True)
        assert _counts(given) == store[1]
        configured = run_dpgm("counts", store[0], "--scope", "smoke,lung", "--json", "--scheduler", address,
                              own_cluster=True, env={
                                  "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": str(files["ca"]),
                                  "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": str(files["cert"]),
                                  "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY": str(files["key"]),
                                  "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"})
        assert _counts(configured) == store[1]
        # no certificate: one line naming TLS and the options (a configuration to fix: 78), quickly
        bare = run_dpgm("counts", store[0], "--scope", "smoke,lung", "--scheduler", address,
                        "--connect-timeout", "5", own_cluster=True)
        line = error_line(bare, 78)
        assert address in line and "--tls-cert" in line
        # a certificate of another authority: the handshake fails, the scheduler does not answer (69)
        other = tls_files(tmp_path / "other", name="other")
        stranger = run_dpgm("counts", store[0], "--scope", "smoke,lung", "--scheduler", address,
                            "--connect-timeout", "5", *dask_tls_arguments(other), own_cluster=True)
        line = error_line(stranger, 69)
        assert address in line


def test_tls_options_name_a_missing_file_with_exit_66(tmp_path, store):
    files = tls_files(tmp_path / "tls")
    result = run_dpgm("counts", store[0], "--scope", "smoke,lung", "--tls-ca-file", files["ca"], "--tls-cert",
                      tmp_path / "nowhere.pem", "--tls-key", files["key"], own_cluster=True)
    line = error_line(result, 66)
    assert "--tls-cert" in line and "nowhere.pem" in line
    partial = run_dpgm("counts", store[0], "--scope", "smoke,lung", "--tls-ca-file", files["ca"], own_cluster=True)
    assert partial.returncode == 2 and "--tls-cert" in partial.stderr


def _listening_hosts(port: int) -> set[str]:
    import psutil

    return {c.laddr.ip for c in psutil.net_connections("tcp") if c.status == "LISTEN" and c.laddr.port == port}


@pytest.mark.parametrize("interface", ["lo", None])
def test_a_jobqueue_scheduler_binds_its_dashboard_to_its_own_interface(interface):
    """``--cluster slurm``: the scheduler runs in dpgm's process; its dashboard listens on the scheduler's
    address (127.0.0.1 with ``interface: lo``), never on every interface (0.0.0.0)."""
    pytest.importorskip("dask_jobqueue")
    from urllib.parse import urlparse

    from dpgm.cluster.remote import _jobqueue_cluster

    options = {"interface": interface} if interface else {}
    with _jobqueue_cluster("slurm", options) as launcher:
        scheduler_host = urlparse(launcher.scheduler_address).hostname
        dashboard_port = urlparse(launcher.dashboard_link).port
        hosts = _listening_hosts(dashboard_port)
        script = launcher.job_script()
    assert "--no-dashboard" in script  # the workers' dashboards would listen on all of their node's interfaces
    if interface == "lo":
        assert scheduler_host == "127.0.0.1"
    assert hosts == {scheduler_host}, (hosts, scheduler_host)
