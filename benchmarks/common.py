"""Shared helpers for the benchmarks: timing, the machine's description, table printing."""

from __future__ import annotations

import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from ayo.engines.llm.config import cpu_model


def setup_benchmark_logging() -> None:
    """INFO progress lines from the benchmark itself, warnings only from the libraries, and the
    hub off (nothing may be downloaded)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    for noisy in ("faiss", "httpx", "ayo"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def machine() -> str:
    """One line naming the device the numbers come from."""
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()} (torch {torch.__version__})"
    return f"{cpu_model()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads (torch {torch.__version__})"


def peer_venv(venv: Path, probe: str, installs: list[list[str]]) -> Path:
    """The interpreter of the virtual environment ``venv`` (a peer's, apart from ours): created
    when missing, and filled by ``installs`` (pip arguments, run in order) when the Python
    ``probe`` fails in it."""
    python = venv / "bin" / "python"
    if not python.is_file():
        logging.getLogger(__name__).info("creating %s", venv)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # -I: the probe must not import this checkout's folders (ours has a `kernels` package)
    if subprocess.run([str(python), "-I", "-c", probe], capture_output=True).returncode != 0:
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
        for args in installs:
            logging.getLogger(__name__).info(
                "installing %s into %s (minutes)", " ".join(args), venv
            )
            subprocess.run([*pip, *args], check=True)
    return python


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(
    fn: Callable[[], object], device: torch.device, min_time: float = 0.2, max_reps: int = 50
) -> float:
    """Median wall time of ``fn`` after warm-up, over repetitions filling ``min_time``."""
    for _ in range(2):
        fn()
    sync(device)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < min_time and len(times) < max_reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def print_table(headers: list[str], rows: list[list[object]]) -> None:
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    line = " | ".join(h.ljust(w) for h, w in zip(headers, widths))
    print(line)
    print("-+-".join("-" * w for w in widths))
    for r in cells:
        print(
            " | ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
        )
