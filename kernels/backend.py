"""Backend choice for the kernels: ``"torch"`` (reference, runs everywhere), ``"triton"``
(GPU, or CPU under ``TRITON_INTERPRET=1``) and ``"flashinfer"`` (GPU, when installed).

Triton and FlashInfer are imported lazily, on the first call that needs them, so that
``import ayo.kernels`` works on a machine with neither.
"""

from __future__ import annotations

import functools
import importlib.util
import os

import torch

BACKENDS = ("torch", "triton", "flashinfer")


class BackendUnavailable(RuntimeError):
    """The requested kernel backend cannot run these tensors on this machine."""


def triton_interpreted() -> bool:
    """True when Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@functools.cache
def triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


@functools.cache
def flashinfer_installed() -> bool:
    return importlib.util.find_spec("flashinfer") is not None


def available_backends(device: torch.device | str) -> list[str]:
    """The backends that can run on ``device``, best first."""
    device = torch.device(device)
    found: list[str] = []
    if device.type == "cuda":
        if flashinfer_installed():
            found.append("flashinfer")
        if triton_installed():
            found.append("triton")
    elif triton_installed() and triton_interpreted():
        found.append("triton")
    found.append("torch")
    return found


def resolve(backend: str | None, device: torch.device, op: str, supported: tuple[str, ...]) -> str:
    """Pick the backend for one call of ``op``.

    Args:
        backend: ``None`` for the best available one that implements ``op``, or a name.
        device: the device of the call's tensors.
        op: the kernel's name, for error messages.
        supported: the backends that implement ``op``.
    Raises:
        ValueError: unknown backend name, or one that does not implement ``op``.
        BackendUnavailable: the backend exists but cannot run on ``device`` here.
    """
    if backend is None:
        if device.type != "cuda":
            return "torch"  # the interpreter is for tests: never chosen implicitly on CPU
        for name in available_backends(device):
            if name in supported:
                return name
        return "torch"
    if backend not in BACKENDS:
        raise ValueError(f"unknown kernel backend {backend!r}; choose one of {BACKENDS} or None")
    if backend not in supported:
        raise ValueError(f"{op} has no {backend!r} implementation; it has {supported}")
    if backend == "torch":
        return backend
    if backend not in available_backends(device):
        if backend == "triton" and not triton_installed():
            why = "triton is not installed (pip install triton)"
        elif backend == "triton":
            why = (
                "Triton needs a CUDA device, or TRITON_INTERPRET=1 set before import for CPU tests"
            )
        elif not flashinfer_installed():
            why = "flashinfer is not installed (pip install 'ayo[gpu]')"
        else:
            why = "FlashInfer needs CUDA tensors"
        raise BackendUnavailable(f"{op}: backend {backend!r} cannot run on {device}: {why}")
    return backend
