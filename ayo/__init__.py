"""Ayo: end-to-end optimized serving of LLM applications on one node.

Sub-packages: ``ayo.kernels`` (compute kernels), ``ayo.engines`` (LLM and retrieval engines),
``ayo.scheduler`` (the primitive graph and its schedulers); workflows, passes and the runtime
live in ``ayo`` itself.
"""

import os
import sys
from pathlib import Path

# Nothing Ayo runs may reach a model hub: every model comes from a local folder or a package.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

__version__ = "0.1.0"

_FOLDERS = ("kernels", "engines", "scheduler")


def _make_checkout_safe() -> None:
    """In a source checkout, ``kernels/``, ``engines/`` and ``scheduler/`` sit beside ``ayo/``
    (an installed wheel has them inside it). Serve them as ``ayo.<folder>`` through this
    package's ``__path__``, and move the checkout's root (put first on ``sys.path`` by
    ``python -m`` from the repo root, or by pytest) behind the installed packages, so a top-level
    ``import kernels`` finds Hugging Face's distribution, never our folder."""
    here = Path(__file__).resolve().parent
    root = here.parent
    if (here / "kernels").is_dir() or not (root / "kernels" / "api.py").is_file():
        return  # an installed wheel, or ayo/ without the checkout around it
    __path__.append(str(root))

    def is_root(entry: str) -> bool:
        try:
            return Path(entry or ".").resolve() == root
        except OSError:
            return False

    if any(is_root(entry) for entry in sys.path):
        sys.path[:] = [entry for entry in sys.path if not is_root(entry)] + [str(root)]
    for name in list(sys.modules):
        module_file = getattr(sys.modules[name], "__file__", None) or ""
        if name.split(".")[0] in _FOLDERS and module_file.startswith(str(root)):
            del sys.modules[name]  # imported before us under the wrong, top-level name


_make_checkout_safe()


def __getattr__(name: str):
    """``ayo.App`` without making ``import ayo`` load the runtime (and torch)."""
    if name == "App":
        from .runtime.app import App

        return App
    raise AttributeError(f"module 'ayo' has no attribute {name!r}")
