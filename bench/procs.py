"""Subprocesses under test: start on a free 127.0.0.1 port, time until ``/healthz`` answers
200, sample peak RSS (the process and its children), and stop cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil  # type: ignore[import-untyped]

# Variables of the parent environment a child must not inherit: they would configure it.
_OWN_PREFIXES = ("SLACK_", "GPUOPS_", "TOGETHER_", "E2E_")


class NotReady(RuntimeError):
    """A child did not answer ``/healthz`` in time: on this shared machine, mostly a sign
    that its cores were saturated (the message says the load)."""


def machine_load() -> str:
    """``load average 14.4 / 16.3 / 15.4 on 2 cores (saturated)``: said with every figure a
    busy machine may have made."""
    loads = os.getloadavg()
    cores = os.cpu_count() or 1
    verdict = " (saturated)" if loads[0] >= cores else ""
    return f"load average {' / '.join(f'{x:.1f}' for x in loads)} on {cores} cores{verdict}"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN_PREFIXES)}
    env.update(extra)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def gpuops_command(port: int) -> list[str]:
    """``gpuops serve`` as installed next to this interpreter (the console script).

    For profiling, ``BENCH_GPUOPS_LAUNCHER=<script.py>`` runs that script instead with the
    same arguments (it calls ``bot.cli.main`` under a profiler or with instrumentation).
    """
    script = Path(sys.executable).parent / "gpuops"
    launcher = os.environ.get("BENCH_GPUOPS_LAUNCHER")
    if launcher:
        head = [sys.executable, launcher]
    elif script.exists():
        head = [str(script)]
    else:
        head = [sys.executable, "-c", _CLI_SHIM]
    return [*head, "--log-level", "WARNING", "serve", "--host", "127.0.0.1", "--port", str(port)]


_CLI_SHIM = "import sys; from bot.cli import main; main(sys.argv[1:])"
_COUNT_SHIM = Path(__file__).resolve().parent / "count_shim.py"


def other_gpuops(where: Path) -> Path:
    """The ``gpuops`` script of another build: ``where`` itself, or a checkout's venv's."""
    script = where / ".venv" / "bin" / "gpuops" if where.is_dir() else where
    if not script.is_file():
        raise FileNotFoundError(f"no gpuops script at {script}")
    return script


def compare_command(script: Path, port: int) -> list[str]:
    """``gpuops serve`` of another build (its own interpreter, next to ``script``), through
    bench/count_shim.py so that an older build's /metrics has the cost counters too."""
    python = script.parent / "python"
    serve = ["--log-level", "WARNING", "serve", "--host", "127.0.0.1", "--port", str(port)]
    return [str(python), str(_COUNT_SHIM), *serve]


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    started: float  # perf_counter at spawn
    ready_seconds: float | None = None
    peak_rss: int = 0
    _sampler: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def events_url(self) -> str:
        return f"{self.base_url}/slack/events"

    @classmethod
    def spawn(
        cls, name: str, argv: list[str], env: dict[str, str], port: int, workdir: Path
    ) -> Child:
        log_path = workdir / f"{name}.log"
        with log_path.open("wb") as log:
            started = time.perf_counter()
            proc = subprocess.Popen(
                argv, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT
            )
        return cls(name, proc, port, log_path, started)

    async def wait_ready(self, within: float = 60.0) -> float:
        """Poll ``/healthz`` until 200; the seconds from spawn to that answer."""
        deadline = self.started + within
        async with httpx.AsyncClient(timeout=1.0) as client:
            while time.perf_counter() < deadline:
                if self.proc.poll() is not None:
                    code = self.proc.returncode
                    raise RuntimeError(f"{self.name} exited ({code}): {self.tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    response = await client.get(f"{self.base_url}/healthz")
                    if response.status_code == 200:
                        self.ready_seconds = time.perf_counter() - self.started
                        return self.ready_seconds
                await asyncio.sleep(0.01)
        raise NotReady(
            f"{self.name} not ready after {within:g} s ({machine_load()}): {self.tail()}"
        )

    def rss(self, children: list[psutil.Process] | None = None) -> int:
        """Resident memory of the process and its children (found now unless given)."""
        try:
            root = psutil.Process(self.proc.pid)
            total = root.memory_info().rss
            for child in root.children(recursive=True) if children is None else children:
                with contextlib.suppress(psutil.Error):
                    total += child.memory_info().rss
        except psutil.Error:
            return 0
        return int(total)

    def start_sampling(self, every: float = 0.1, rescan: float = 2.0) -> None:
        """Sample RSS every ``every`` s; look for new children every ``rescan`` s (finding
        them scans all of /proc, which would cost the driver more than the sample)."""

        async def sample() -> None:
            children: list[psutil.Process] = []
            scanned = 0.0
            while True:
                now = time.perf_counter()
                if now - scanned >= rescan:
                    with contextlib.suppress(psutil.Error):
                        children = psutil.Process(self.proc.pid).children(recursive=True)
                    scanned = now
                self.peak_rss = max(self.peak_rss, self.rss(children))
                await asyncio.sleep(every)

        self._sampler = asyncio.create_task(sample())

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self.peak_rss = max(self.peak_rss, self.rss())
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            for _ in range(100):
                if self.proc.poll() is not None:
                    break
                await asyncio.sleep(0.05)
            else:
                self.proc.kill()
                self.proc.wait()

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
