"""Ayo: end-to-end optimized serving of LLM applications on one node.

Sub-packages: ``ayo.kernels`` (compute kernels), ``ayo.engines`` (LLM and retrieval engines),
``ayo.scheduler`` (the primitive graph and its schedulers); workflows, passes and the runtime
live in ``ayo`` itself.
"""

import os

# Nothing Ayo runs may reach a model hub: every model comes from a local folder or a package.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

__version__ = "0.1.0"


def __getattr__(name: str):
    """``ayo.App`` without making ``import ayo`` load the runtime (and torch)."""
    if name == "App":
        from .app import App

        return App
    raise AttributeError(f"module 'ayo' has no attribute {name!r}")
