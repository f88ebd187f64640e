"""Every fenced code block of ``README.md`` and ``docs/*.md`` runs as written, on small data.

One test per page. The page's blocks run in order in one temporary folder, so a later block may use
the files an earlier one wrote:

* ```` ```python ```` in a fresh interpreter (``python block.py``), exit code 0;
* ```` ```console ```` as ``$ command`` lines, each in ``bash`` with the environment's ``dpgm`` on
  ``PATH``; the lines below a command are its output: every line without ``...`` must appear in
  what the command printed (spaces collapsed), and a command whose output shows ``Error:`` must
  fail; ```` ```bash ```` / ```` ```shell ```` as one script, exit code 0;
* ```` ```yaml ```` / ```` ```toml ```` whose first line is ``# NAME`` are written to ``NAME``.

A block that cannot run as written says so in a directive, an HTML comment just above it holding
a YAML mapping (``<!-- docs-test: ... -->``):

``skip: REASON``
    not run; the reason is required (a real Slurm cluster, R).
``file: NAME``
    written to ``NAME`` instead of run.
``output: true``
    the output shown for the block above it, checked as a console block's output is.
``setup: CODE``
    run before the block (Python before a Python block, shell before a shell block): it makes
    the variables or files the block takes as given.
``replace: {OLD: NEW}``
    substitutions made in the block before it runs (an ``s3://`` URL served by a local S3 server,
    fewer rows); every ``OLD`` must occur.
``expect: [TEXT, ...]``
    the key lines checked instead of the shown output (which holds times, paths, addresses).
``env: {NAME: VALUE}``, ``returncode: N``, ``timeout: SECONDS``.

Commands connect to one shared 2-worker ``LocalCluster`` (``DASK_SCHEDULER_ADDRESS``) instead of
each starting its own, which is what keeps the runner to a few minutes.
"""

from __future__ import annotations

import os
import re
import string
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DIRECTIVE_KEYS = {"skip", "file", "output", "setup", "replace", "expect", "env", "returncode", "timeout"}
SHELL = ("console", "bash", "shell", "sh")
FILES = ("yaml", "toml", "text", "json", "csv")
FENCE = re.compile(r"^(\s*)```(\S*)(.*)$")
NUMBER_TOKEN = re.compile(r"\s+")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it starts, its language, its text and its directive."""

    page: Path
    line: int
    language: str
    text: str
    directive: dict = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` with the ``docs-test`` directive just above each (MyST directives,
    ```` ```{name} ````, are not code and are left out)."""
    lines = page.read_text().splitlines()
    found, directive, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("<!-- docs-test:"):
            end = next(j for j in range(i, len(lines)) if "-->" in lines[j])
            body = "\n".join(lines[i:end + 1]).strip()[len("<!-- docs-test:"):-len("-->")]
            directive = yaml.safe_load(body) or {}
            assert isinstance(directive, dict), f"{page.name}:{i + 1}: a docs-test directive is a mapping"
            unknown = set(directive) - DIRECTIVE_KEYS
            assert not unknown, f"{page.name}:{i + 1}: unknown docs-test keys {sorted(unknown)}"
            i = end + 1
            continue
        opened = FENCE.match(line)
        if opened:
            indent, language = opened.group(1), opened.group(2)
            close = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            body = [text[len(indent):] if text.startswith(indent) else text.lstrip() for text in lines[i + 1:close]]
            if not language.startswith("{"):
                found.append(Block(page, i + 1, language, "\n".join(body) + "\n", directive or {}))
            directive, i = None, close + 1
            continue
        if line.strip():
            directive = None
        i += 1
    return found


def _substituted(block: Block, environment: dict[str, str]) -> str:
    """The block with the directive's substitutions made (``${NAME}`` in a new text is the environment's)."""
    text = block.text
    for old, new in (block.directive.get("replace") or {}).items():
        assert old in text, f"{block.where}: the substitution's {old!r} is not in the block"
        text = text.replace(old, string.Template(str(new)).safe_substitute(environment))
    return text


def _normal(text: str) -> str:
    return NUMBER_TOKEN.sub(" ", text).strip()


def _check_output(block: Block, shown: list[str], printed: str) -> None:
    """Every shown line without ``...`` appears in ``printed`` (or the directive's ``expect`` lines do)."""
    wanted = block.directive.get("expect")
    wanted = list(wanted) if wanted is not None else [s for s in shown if s.strip() and "..." not in s]
    flat = _normal(printed)
    for line in wanted:
        assert _normal(line) in flat, f"{block.where}: {line!r} is not in the output:\n{printed[-3000:]}"


def _environment(block: Block, environment: dict[str, str]) -> dict[str, str]:
    """``environment`` with the directive's ``env`` (a null value removes the variable)."""
    changed = dict(environment)
    for name, value in (block.directive.get("env") or {}).items():
        if value is None:
            changed.pop(name, None)
        else:
            changed[name] = str(value)
    return changed


def _run(argv: list[str], block: Block, folder: Path, environment: dict[str, str]) -> subprocess.CompletedProcess:
    timeout = float(block.directive.get("timeout", 300))
    return subprocess.run(argv, cwd=folder, env=_environment(block, environment), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _commands(text: str) -> list[tuple[str, list[str]]]:
    """A console block's ``$ command`` lines (``\\`` continues a line) each with the output shown below it."""
    commands: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            command = line[2:]
            while command.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                command = command.rstrip()[:-1] + " " + lines[i].strip()
            commands.append((command, []))
        else:
            assert commands, f"output before any command: {line!r}"
            commands[-1][1].append(line)
        i += 1
    return commands


def run_block(block: Block, folder: Path, environment: dict[str, str], previous: str) -> str:
    """Run one block in ``folder``; return what it printed (for an ``output`` block after it)."""
    directive, text = block.directive, _substituted(block, environment)
    expected_code = int(directive.get("returncode", 0))
    if "skip" in directive:
        assert str(directive["skip"]).strip(), f"{block.where}: a skipped block says why"
        return previous
    if "file" in directive:
        (folder / directive["file"]).write_text(text)
        return previous
    if directive.get("output"):
        _check_output(block, text.splitlines(), previous)
        return previous
    if block.language == "python":
        script = folder / f"block_{block.line}.py"
        script.write_text((directive.get("setup") or "") + "\n" + text)
        done = _run([sys.executable, script.name], block, folder, environment)
        assert done.returncode == expected_code, f"{block.where} exit {done.returncode}:\n{done.stderr[-4000:]}"
        printed = done.stdout + done.stderr
        if "expect" in directive:
            _check_output(block, [], printed)
        return printed
    if block.language in SHELL:
        setup = directive.get("setup") or ""
        if setup:
            done = _run(["bash", "-c", setup], block, folder, environment)
            assert done.returncode == 0, f"{block.where}: setup exit {done.returncode}:\n{done.stderr[-3000:]}"
        if not any(line.startswith("$ ") for line in text.splitlines()):
            done = _run(["bash", "-eo", "pipefail", "-c", text], block, folder, environment)
            assert done.returncode == expected_code, f"{block.where} exit {done.returncode}:\n{done.stderr[-4000:]}"
            printed = done.stdout + done.stderr
            if "expect" in directive:
                _check_output(block, [], printed)
            return printed
        printed, background = "", []
        try:
            for command, shown in _commands(text):
                if command.rstrip().endswith("&"):  # runs beside the next commands, which start 3 s later
                    background.append(subprocess.Popen(["bash", "-c", command.rstrip()[:-1]], cwd=folder,
                                                       env=_environment(block, environment), stdin=subprocess.DEVNULL,
                                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                    time.sleep(3)
                    continue
                done = _run(["bash", "-c", command], block, folder, environment)
                output = done.stdout + done.stderr
                if "returncode" in directive:
                    assert done.returncode == expected_code, f"{block.where}: `{command}` exit {done.returncode}:\n{output[-4000:]}"
                else:
                    fails = any(line.startswith("Error:") for line in shown)
                    assert (done.returncode != 0) == fails, f"{block.where}: `{command}` exit {done.returncode}:\n{output[-4000:]}"
                if "expect" not in directive:
                    _check_output(block, shown, output)
                printed += output
        finally:
            for process in background:
                process.wait(timeout=float(directive.get("timeout", 300)))
        if "expect" in directive:
            _check_output(block, [], printed)
        return printed
    if block.language in FILES and block.text.startswith("# "):
        (folder / block.text.splitlines()[0][2:].split()[0]).write_text(text)
        return previous
    raise AssertionError(f"{block.where}: a ```{block.language} block that neither runs nor has a docs-test "
                         "directive (skip, file, output); give it one, or a language that runs")


@pytest.fixture(scope="module")
def s3_endpoint():
    """An S3-compatible server on loopback (moto) with the bucket ``bucket`` the pages name."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    import boto3

    boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket="bucket")
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def environment(client, s3_endpoint) -> dict[str, str]:
    """The commands' environment: this checkout importable, its ``dpgm`` on ``PATH``, the shared cluster, the
    S3 server (``S3_ENDPOINT`` and its credentials)."""
    bin_folder = str(Path(sys.executable).parent)
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": bin_folder + os.pathsep + os.environ["PATH"],
                   "DASK_SCHEDULER_ADDRESS": client.scheduler.address, "PYTHONWARNINGS": "ignore::FutureWarning",
                   "S3_ENDPOINT": s3_endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                   "AWS_DEFAULT_REGION": "us-east-1"}
    environment.pop("DASK_SCHEDULER_FILE", None)
    return environment


def test_every_block_is_parsed_and_every_directive_is_known():
    blocks = [block for page in PAGES for block in blocks_of(page)]
    assert len(blocks) > 50 and {block.page.name for block in blocks} >= {"README.md", "data.md", "em.md"}
    skipped = [block.where for block in blocks if "skip" in block.directive]
    assert len(skipped) <= 6, f"too many blocks do not run: {skipped}"


def test_the_api_reference_lists_every_public_name():
    import dpgm

    listed = re.findall(r"^   (\w+)$", (ROOT / "docs" / "api.md").read_text(), flags=re.M)
    assert sorted(listed) == sorted(dpgm.__all__)


def test_every_page_is_in_the_table_of_contents():
    index = (ROOT / "docs" / "index.md").read_text()
    for page in PAGES[1:]:
        assert page.name == "index.md" or f"\n{page.stem}\n" in index, f"{page.name} is not in docs/index.md"


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_every_code_block_of_the_page_runs(page, environment, tmp_path):
    previous = ""
    for block in blocks_of(page):
        previous = run_block(block, tmp_path, environment, previous)
