"""The locked install: requirements/*.txt agree with pyproject.toml, with each other and with this environment."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements" / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            match = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)==([^\s;]+)(\s*;.*)?", line)
            assert match, f"{name}: {line!r} is not pinned with =="
            pins[canonicalize_name(match.group(1).split("[")[0])] = match.group(2)
    return pins


def _declared(*extras: str) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    return [Requirement(spec) for spec in wanted]


@pytest.mark.parametrize(("lock", "extras"), [("runtime.txt", ("plot",)), ("test.txt", ("plot", "test")),
                                              ("docs.txt", ("plot", "docs"))])
def test_every_declared_dependency_is_pinned_within_its_range(lock, extras):
    pins = _pins(lock)
    for requirement in _declared(*extras):
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not in requirements/{lock}"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements/{lock} pins {name}=={pins[name]}, outside pyproject's {requirement}")


def test_the_runtime_set_is_the_test_sets_versions():
    runtime, test = _pins("runtime.txt"), _pins("test.txt")
    assert set(runtime) <= set(test)
    assert {name: version for name, version in test.items() if name in runtime} == runtime
    assert not {"pytest", "moto", "pgmpy", "statsmodels", "ruff"} & set(runtime)  # the demo needs none


def test_the_docs_set_is_the_runtime_set_plus_sphinx_at_the_test_sets_versions():
    """`make docs` installs requirements/docs.txt over the runtime set: no package changes version."""
    runtime, test, docs = _pins("runtime.txt"), _pins("test.txt"), _pins("docs.txt")
    assert {name: version for name, version in docs.items() if name in runtime} == runtime
    assert {name: version for name, version in docs.items() if name in test} == {
        name: version for name, version in test.items() if name in docs}
    assert {"sphinx", "pydata-sphinx-theme", "numpydoc", "myst-parser"} <= set(docs)
    assert not {"pytest", "moto", "pgmpy", "statsmodels", "ruff"} & set(docs)


def test_this_environment_was_installed_from_the_lock():
    """What `make test` (and so CI) runs on: the locked versions, not whatever resolved that day."""
    differ = {}
    for name, version in _pins("test.txt").items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            differ[name] = (version, None)
            continue
        if Version(installed) != Version(version):
            differ[name] = (version, installed)
    assert not differ, f"installed versions differ from requirements/test.txt (locked, installed): {differ}"
