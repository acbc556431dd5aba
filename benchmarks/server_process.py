"""``python -m ayo.server`` as a subprocess for the benchmarks that talk to a real server.

    with ServerProcess(["--corpus-limit", "200"]) as server:
        print(server.url)

It binds 127.0.0.1 on a free port (read from its INFO log), keeps its log lines, and on exit sends
SIGTERM and records how long the server took to exit and with which code.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


class ServerProcess:
    def __init__(
        self, args: list[str], data_dir: str | Path | None = None, start_timeout: float = 600
    ) -> None:
        self._tmp = None if data_dir else tempfile.TemporaryDirectory(prefix="ayo-bench-")
        self.data_dir = Path(data_dir or self._tmp.name)
        self.args = ["--port", "0", "--data-dir", str(self.data_dir), *args]
        self.start_timeout = start_timeout
        self.lines: list[str] = []
        self.url = ""
        self.exit_code: int | None = None
        self.exit_s: float | None = None
        self._listening = threading.Event()

    def __enter__(self) -> ServerProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ayo.server", *self.args],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self._wait_listening():
            self.proc.kill()
            raise RuntimeError("the server did not start:\n" + "\n".join(self.lines[-30:]))
        return self

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip())
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
            if found:
                self.url = found.group(1)
                self._listening.set()
        self._listening.set()  # exited before listening: __enter__ reports the log

    def _wait_listening(self) -> bool:
        """Until the log names the port or the process ends (it must log at INFO)."""
        deadline = time.monotonic() + self.start_timeout
        while not self._listening.wait(0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return False
        return bool(self.url)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM; the exit code (the process is killed after ``timeout`` seconds)."""
        if self.exit_code is None:
            start = time.perf_counter()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.exit_code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.exit_code = self.proc.wait()
            self.exit_s = time.perf_counter() - start
            self._reader.join(5)
        return self.exit_code

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def errors(self) -> list[str]:
        """ERROR lines of Ayo's loggers (aiohttp's own, for malformed HTTP it answers 400
        itself, are :meth:`http_rejections`)."""
        return [line for line in self.lines if " ERROR " in line and " ERROR aiohttp." not in line]

    def http_rejections(self) -> list[str]:
        """aiohttp's ERROR lines for requests it could not parse (a NUL byte in a header...)."""
        return [line for line in self.lines if " ERROR aiohttp.server" in line]
