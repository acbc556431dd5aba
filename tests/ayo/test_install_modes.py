"""The package imports the same way under every install: ``scripts/setup.sh``'s compat editable
install, a plain ``pip install -e .`` (setuptools' default editable mode, which ``setup.py``
makes compat for this project) and a wheel (``pip install .``). Each is checked from the parent
of a checkout named ``ayo`` (git's default folder name, a namespace package without ``__init__``
that shadowed ``ayo`` under setuptools' strict editable mode) and from an unrelated directory.

Each install goes into a fresh virtual environment whose dependencies are this interpreter's
(a ``.pth`` line; nothing is downloaded), built without build isolation."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODES = {
    "compat editable (setup.sh)": ["-e", ".", "--config-settings", "editable_mode=compat"],
    "plain editable": ["-e", "."],
    "wheel": ["."],
}
CHECK = (
    "import ayo, ayo.engines.llm.sampling, ayo.scheduler, ayo.server.app, kernels\n"
    "from ayo import App\n"
    "print(ayo.__version__, App.__module__, 'hf-kernels' if 'site-packages' in kernels.__file__ "
    "else kernels.__file__)"
)


def _copy_checkout(dest: Path) -> Path:
    """The checkout's files (not its virtual environments, build output or git data)."""
    skip = shutil.ignore_patterns(".git", ".venv*", "build", "*.egg-info", "__pycache__", "site")
    shutil.copytree(ROOT, dest, ignore=skip, symlinks=True)
    return dest


def _venv(where: Path) -> Path:
    """A virtual environment without pip whose site-packages sees this interpreter's."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ours = sysconfig.get_paths()["purelib"]
    Path(purelib, "zz_dependencies.pth").write_text(ours + "\n")  # read last: after ayo's
    return python


@pytest.mark.slow  # three installs: ~30 s on 2 cores
@pytest.mark.parametrize("mode", list(MODES))
def test_every_install_mode_imports_ayo_from_any_directory(mode: str, tmp_path: Path) -> None:
    parent = tmp_path / "parent"
    checkout = _copy_checkout(parent / "ayo")  # the clone's default name
    python = _venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = [sys.executable, "-m", "pip", "--python", str(python), "--disable-pip-version-check",
           "-q", "install", "--no-deps", "--no-build-isolation"]  # fmt: skip
    out = subprocess.run(
        [*pip, *MODES[mode]], cwd=checkout, env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for cwd in (parent, elsewhere):
        run = subprocess.run([str(python), "-c", CHECK], cwd=cwd, env=env, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        assert run.returncode == 0, (mode, cwd, run.stderr[-3000:])
        assert run.stdout.split() == ["0.1.0", "ayo.runtime.app", "hf-kernels"], run.stdout
        cli = subprocess.run([str(python), "-m", "ayo.server", "--help"], cwd=cwd, env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert cli.returncode == 0 and "--max-queued-queries" in cli.stdout, cli.stderr[-3000:]
