"""Small helpers for the server tests: SSE parsing, a bounded wait on a condition, and
``python -m ayo.server`` as a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    """``(event, data)`` pairs of a ``text/event-stream`` response, data parsed as JSON."""
    event, data = "message", []
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if not line:
            if data:
                yield event, json.loads("\n".join(data))
            event, data = "message", []
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


async def wait_until(check: Callable[[], bool], timeout: float = 20.0) -> bool:
    """True once ``check()`` holds (it reads state of another thread), False after ``timeout``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


async def error_of(response: aiohttp.ClientResponse) -> dict[str, str]:
    """The ``error`` object of a JSON error response (asserting the shape)."""
    assert response.content_type == "application/json", await response.text()
    body = await response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message"}, body
    assert "Traceback" not in body["error"]["message"]
    return body["error"]


class ServerProcess:
    """``python -m ayo.server --port 0`` in a subprocess (the log names the port); its log lines
    are collected. ``cwd`` is the working directory it starts in (the default: this process's);
    ``profile``: let a first start measure the engines (off unless a test checks it);
    ``prefix``: a command the server runs under (``strace -f ...``)."""

    def __init__(
        self,
        data_dir: Path,
        corpus_limit: int,
        cwd: Path | None = None,
        args: tuple = (),
        profile: bool = False,
        prefix: tuple[str, ...] = (),
    ) -> None:
        self.prefix = prefix
        self.data_dir = data_dir
        self.corpus_limit = corpus_limit
        self.cwd = cwd
        # measuring the engines at a first start costs seconds: only where a test checks it
        self.args = args if profile else (*args, "--no-profile-engines")
        self.url = ""
        self.lines: list[str] = []

    async def start(self, timeout: float = 120) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.prefix, sys.executable, "-m", "ayo.server", "--port", "0",
            "--data-dir", str(self.data_dir), "--corpus", "wiki", "--corpus-limit", str(self.corpus_limit), *self.args,
            cwd=self.cwd, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            await asyncio.wait_for(self._read_until("listening on"), timeout=timeout)
        except asyncio.TimeoutError:
            self.kill()
            raise AssertionError(f"the server did not listen within {timeout:g} s:\n"
                                 + "\n".join(self.lines[-40:])) from None  # fmt: skip
        self.url = re.search(r"listening on (http://127\.0\.0\.1:\d+)", self.lines[-1]).group(1)
        self.drain = asyncio.ensure_future(self._read_until(None))

    async def _read_until(self, needle: str | None) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.lines.append(line.decode(errors="replace").rstrip())
            if needle and needle in self.lines[-1]:
                return
        if needle:
            raise AssertionError("server exited before listening:\n" + "\n".join(self.lines))

    async def stop(self, timeout: float = 60) -> int:
        """SIGTERM, then the exit code (``asyncio.TimeoutError`` after ``timeout`` seconds).
        Under a ``prefix`` the signal goes to the server, the prefix's child (strace exits
        with its tracee's code)."""
        pid = self.proc.pid
        if self.prefix:
            pid = int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
        os.kill(pid, signal.SIGTERM)
        code = await asyncio.wait_for(self.proc.wait(), timeout=timeout)
        await self.drain
        return code

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()

    def log(self) -> str:
        return "\n".join(self.lines)
