"""The two distributions, installed as built wheels from uv.lock (``uv sync --frozen
--no-editable``, as a user's install is, not the checkout's editable one): gpuops alone —
what the image installs — holds no file of ``bot/local``, and its ``gpuops demo`` and
``gpuops simulate`` say where those are; with the ``local`` group, gpuops-local holds every
file of ``bot/local`` and nothing else, and ``gpuops demo --script`` runs from the wheels."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import PathDistribution
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
UV = Path(sys.executable).with_name("uv")  # the Makefile installs it into the venv
LOCAL = ROOT / "bot" / "local"
TIMEOUT = 300  # an install or a demo run on a loaded 2-core machine: a bound, not a margin


def install(venv: Path, *groups: str) -> Path:
    """A fresh venv with the lock's gpuops (and ``groups``) installed as wheels."""
    args = [str(UV), "sync", "--frozen", "--offline", "--no-editable", "--quiet"]
    # Built anew from this checkout: uv's cache keys a local project's wheel on its
    # pyproject.toml alone, so a changed module would otherwise install an older wheel.
    args += ["--reinstall-package", "gpuops", "--reinstall-package", "gpuops-local"]
    args += [arg for group in groups for arg in ("--group", group)]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["UV_PROJECT_ENVIRONMENT"] = str(venv)
    done = subprocess.run(  # noqa: S603 - our own uv, fixed arguments
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert done.returncode == 0, done.stderr
    return venv


def run(venv: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command of ``venv`` run outside the checkout (so nothing is imported from it)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    return subprocess.run(  # noqa: S603 - the venv's own commands
        [str(venv / "bin" / args[0]), *args[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def files_of(venv: Path, name: str) -> set[str] | None:
    """The files the distribution ``name`` installed (its RECORD, less its metadata), or
    None when it is not installed."""
    found = list(venv.glob(f"lib/python3*/site-packages/{name.replace('-', '_')}-*.dist-info"))
    if not found:
        return None
    listed = PathDistribution(found[0]).files or []
    return {f.as_posix() for f in listed if ".dist-info/" not in f.as_posix()}


def local_tools() -> set[str]:
    """Every file of the checkout's bot/local but its pyproject.toml, as installed paths."""
    files = {p for p in LOCAL.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    return {p.relative_to(ROOT).as_posix() for p in files if p.name != "pyproject.toml"}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("distributions")


@pytest.fixture(scope="module")
def server(workdir: Path) -> Path:
    return install(workdir / "server")


@pytest.fixture(scope="module")
def local(workdir: Path) -> Path:
    return install(workdir / "local", "local")


def test_gpuops_alone_has_no_local_tool_and_says_where_they_are(
    server: Path, workdir: Path
) -> None:
    production = files_of(server, "gpuops")
    assert production is not None and "bot/cli.py" in production
    assert "handlers/commands.py" in production
    assert {f for f in production if f.startswith("bot/local")} == set()
    assert files_of(server, "gpuops-local") is None
    assert list(server.glob("lib/python3*/site-packages/bot/local")) == []
    for command, what in (("demo", "demo"), ("simulate", "simulator")):
        done = run(server, "gpuops", command, cwd=workdir)
        assert done.returncode == 1, done.stderr
        assert f"the {what} is not part of this installation" in done.stderr
        assert "gpuops-local distribution" in done.stderr and "make demo" in done.stderr
        assert "Traceback" not in done.stderr


def test_gpuops_local_holds_bot_local_whole_and_the_demo_runs_from_it(
    local: Path, workdir: Path
) -> None:
    assert files_of(local, "gpuops-local") == local_tools()
    assert "bot/local/demo/demo-policy.yml" in local_tools()  # data files are in it too
    production = files_of(local, "gpuops")
    assert production is not None and not any(f.startswith("bot/local") for f in production)

    where = run(local, "python", "-c", "import bot.local; print(bot.local.__file__)", cwd=workdir)
    assert Path(where.stdout.strip()).is_relative_to(local), where.stderr
    script = ROOT / "examples" / "home.script"
    done = run(local, "gpuops", "demo", "--no-tour", "--script", str(script), cwd=workdir)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.rstrip().endswith("all passed")
