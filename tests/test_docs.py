"""The docs as a reader meets them: the site builds with every link resolving (``mkdocs build
--strict``), every Python example marked ``# runs as written`` runs as written, and every
``python -m`` command the README and ``docs/*.md`` show names a module that exists (its
``--help`` exits 0). No network: the examples run on the fake engines."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = "# runs as written"
# a fenced block: its indentation, language and body, closed by a fence at the same indentation
FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)
COMMAND = re.compile(
    r"(?:^|[\s;&|(])(?:[\w./-]*/)?python3? -m (?P<module>[\w.]+)(?P<rest>[^\n;&|#]*)"
)
MODULES = re.compile(r"ayo|ayo\.server|ayo\.cluster|benchmarks\.\w+")
SUBCOMMANDS = ("plan", "run", "profile", "ingest")  # `python -m ayo demo` has no --help
HELP_TIMEOUT_S = 120


def _blocks() -> list[tuple[Path, str, str]]:
    """(page, language, body) of every fenced code block, the body dedented."""
    out = []
    for page in PAGES:
        for m in FENCE.finditer(page.read_text(encoding="utf-8")):
            indent = len(m["indent"])
            body = "".join(line[indent:] for line in m["body"].splitlines(keepends=True))
            out.append((page, m["lang"], body))
    return out


def _examples() -> list[tuple[str, str]]:
    """(id, code) of the Python blocks whose first line is the marker."""
    found = []
    for page, lang, body in _blocks():
        if lang == "python" and body.split("\n", 1)[0].strip() == RUNNABLE:
            name = page.relative_to(ROOT).as_posix()
            found.append((f"{name}:{sum(f.startswith(name + ':') for f, _ in found) + 1}", body))
    return found


def _help_commands() -> list[list[str]]:
    """The distinct ``python -m MODULE [SUB] --help`` command lines the pages' code blocks name."""
    commands: dict[tuple[str, ...], None] = {}
    for _page, lang, body in _blocks():
        if lang == "python":
            continue
        for m in COMMAND.finditer(body):
            module = m["module"]
            if not MODULES.fullmatch(module):
                continue  # pip, mkdocs, ...: not ours
            commands[(module,)] = None
            words = m["rest"].split()
            if module == "ayo" and words and words[0] in SUBCOMMANDS:
                commands[(module, words[0])] = None
    return [[sys.executable, "-m", *key, "--help"] for key in commands]


EXAMPLES = _examples()


def test_the_site_builds_strict(tmp_path: Path) -> None:
    """Every page in the nav, every link between pages and every #anchor resolves."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (the test extra: scripts/setup.sh test)")
    site = tmp_path / "site"
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HELP_TIMEOUT_S,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert (site / "index.html").is_file()


def test_readme_links_resolve() -> None:
    """The README is not part of the site: its relative links (docs pages, their anchors, files)
    are checked here."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL
        path, _, anchor = target.partition("#")
        if not (ROOT / path).exists():
            missing.append(target)
        elif anchor and path.endswith(".md"):
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(encoding="utf-8"), re.M)
            if anchor not in {_slug(h) for h in headings}:
                missing.append(target)
    assert not missing, f"README links that do not resolve: {missing}"


def _slug(heading: str) -> str:
    """A heading's anchor as Python-Markdown's toc extension makes it."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def test_there_are_runnable_examples() -> None:
    assert len(EXAMPLES) >= 2, "no Python block starts with '# runs as written'"


@pytest.mark.parametrize(("name", "code"), EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_example_runs_as_written(name: str, code: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert out.returncode == 0, f"{name} failed:\n{code}\n{out.stdout}\n{out.stderr}"


def test_every_python_m_command_exists() -> None:
    """``--help`` of each module (and ``python -m ayo`` subcommand) the pages' commands name,
    each once, as many at a time as there are cores."""
    commands = _help_commands()
    names = {" ".join(c[2:-1]) for c in commands}
    assert {"ayo", "ayo.server", "ayo.cluster"} <= names, names

    def run(command: list[str]) -> tuple[str, subprocess.CompletedProcess[str]]:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=HELP_TIMEOUT_S
        )
        return " ".join(command[2:]), done

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        results = list(pool.map(run, commands))
    failed = [
        f"python -m {line}: exit {done.returncode}\n{done.stderr[-2000:]}"
        for line, done in results
        if done.returncode != 0
    ]
    assert not failed, "\n\n".join(failed)
