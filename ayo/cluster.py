"""Where engine instances run: a placement per instance (this process, or a Ray actor on the node
holding some resources), joining a Ray cluster, and starting one on this machine.

An engine's placement is one entry or a list of them (replicas behind one engine scheduler)::

    app.add_engine("llm", make_llm, kind="llm",
                   placement=[Placement.LOCAL, Placement(resources={"gpu_node": 0.5})])

and in the server's ``--config`` file, with the cluster's address::

    {"ray_address": "10.0.0.1:6379",
     "placement": {"llm": ["local", {"resources": {"gpu_node": 0.5}, "num_cpus": 4}]}}

A one-machine cluster that talks only over 127.0.0.1 (trials, tests)::

    python -m ayo.cluster start --head --port 6379
    python -m ayo.cluster start --address 127.0.0.1:6379 --num-cpus 2 --resources '{"worker": 1}'
    python -m ayo.cluster stop
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    """Where one instance of an engine runs.

    Attributes:
        local: in this process (the other fields are unused).
        resources: Ray custom resources choosing the node (``{"gpu_node": 0.5}``); a node
            declares them at ``ray start --resources``. Actors consume them: give each a
            fraction of the node's amount.
        num_cpus: CPUs the actor reserves (its engine's threads should match).
        max_restarts: how often Ray rebuilds a dead actor.
    """

    local: bool = False
    resources: Mapping[str, float] = field(default_factory=dict)
    num_cpus: float = 1
    max_restarts: int = 1

    LOCAL: ClassVar[Placement]
    FIELDS: ClassVar[tuple[str, ...]] = ("resources", "num_cpus", "max_restarts")

    def __post_init__(self) -> None:
        if not isinstance(self.resources, Mapping) or not all(
            isinstance(k, str) and _number(v) and v > 0 for k, v in self.resources.items()
        ):
            raise ValueError(
                f"resources must map names to positive amounts, got {self.resources!r}"
            )
        if not _number(self.num_cpus) or self.num_cpus < 0:
            raise ValueError(f"num_cpus must be a number >= 0, got {self.num_cpus!r}")
        if not isinstance(self.max_restarts, int) or self.max_restarts < -1:
            raise ValueError(f"max_restarts must be an integer >= -1, got {self.max_restarts!r}")

    @classmethod
    def parse(cls, engine: str, value: Any) -> list[Placement]:
        """An engine's placement from a config file: ``"local"``, an object with the fields
        above, or a list of those (replicas). ValueError names the engine and the fault."""
        entries = value if isinstance(value, list) else [value]
        if not entries:
            raise ValueError(f"placement of {engine!r}: give at least one instance")
        out = []
        for entry in entries:
            if entry == "local":
                out.append(cls.LOCAL)
            elif isinstance(entry, dict):
                unknown = sorted(set(entry) - set(cls.FIELDS))
                if unknown:
                    raise ValueError(f"placement of {engine!r}: unknown keys {unknown}; "
                                     f"known: {list(cls.FIELDS)}")  # fmt: skip
                try:
                    out.append(cls(**entry))
                except ValueError as exc:
                    raise ValueError(f"placement of {engine!r}: {exc}") from None
            else:
                raise ValueError(f"placement of {engine!r}: each instance is \"local\" or an "
                                 f"object with {list(cls.FIELDS)}, got {entry!r}")  # fmt: skip
        return out

    def to_json(self) -> Any:
        if self.local:
            return "local"
        return {"resources": dict(self.resources), "num_cpus": self.num_cpus,
                "max_restarts": self.max_restarts}  # fmt: skip


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


Placement.LOCAL = Placement(local=True)


def place(
    name: str,
    factory: Callable[[], Any],
    placements: Placement | Sequence[Placement],
    kind: str,
    local: Any = None,
) -> list[Any]:
    """The instances of engine ``name`` its placements ask for: ``factory()`` here for a local
    one (or ``local``, an engine already built), a :class:`~ayo.remote.RemoteEngine` building
    ``factory()`` on its node for a remote one (``factory`` must then be picklable: a
    module-level function or a ``functools.partial`` of one)."""
    from ayo.remote import KINDS, RemoteEngine

    if kind not in KINDS:
        raise ValueError(f"engine {name!r}: a placed engine needs kind= one of {KINDS}")
    items = [placements] if isinstance(placements, Placement) else list(placements)
    if not items:
        raise ValueError(f"engine {name!r}: give at least one placement")
    return [
        (factory() if local is None else local) if p.local else RemoteEngine(factory, kind, resources=dict(p.resources),
                                               num_cpus=p.num_cpus, max_restarts=p.max_restarts)
        for p in items
    ]  # fmt: skip


def is_loopback_address(address: str) -> bool:
    """Whether a Ray address (``host:port``) is on this machine's loopback."""
    host = address.rpartition(":")[0] or address
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def connect(address: str) -> Any:
    """Join the Ray cluster at ``address`` as its driver (``ray.init``). A loopback address is
    joined under :func:`ayo.remote.loopback_environment` (node address 127.0.0.1, nothing
    beyond it); another address by Ray's own discovery of this node's address."""
    from ayo.remote import LOOPBACK, _ray, loopback_environment

    ray = _ray()
    if ray.is_initialized():
        return ray.get_runtime_context()
    if is_loopback_address(address):
        with loopback_environment():
            return ray.init(address=address, _node_ip_address=LOOPBACK, log_to_driver=False)
    return ray.init(address=address, log_to_driver=False)


def _ray_cli(args: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    cmd = [sys.executable, "-m", "ray.scripts.scripts", *args]
    return subprocess.call(cmd, env={**os.environ, **(env or {})})


def start(argv: Sequence[str]) -> int:
    """``ray start`` for a node of a one-machine cluster on 127.0.0.1: the loopback-only
    environment, node address 127.0.0.1, no dashboard; other flags pass through."""
    from ayo.remote import LOOPBACK, loopback_environment

    extra = ["--node-ip-address", LOOPBACK, "--disable-usage-stats"]
    if "--head" in argv:
        extra += ["--include-dashboard", "false"]
    with loopback_environment() as env:  # the node's processes keep this environment
        return _ray_cli(["start", *extra, "--temp-dir", env["RAY_TMPDIR"], *argv], env)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m ayo.cluster",
        description="Start or stop the nodes of a Ray cluster on this machine that talks only "
        "over 127.0.0.1 (a cluster across machines: plain `ray start`, see README).",
    )
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("start", help="ray start for a loopback node; flags pass through "
                       "(--head --port 6379, or --address 127.0.0.1:6379 --resources JSON)")  # fmt: skip
    s.add_argument("ray_args", nargs=argparse.REMAINDER)
    sub.add_parser("stop", help="ray stop: every Ray node process of this machine")
    args, rest = p.parse_known_args(argv)
    if args.command == "stop":
        return _ray_cli(["stop"])
    ray_args = [*rest, *args.ray_args]
    if "--head" not in ray_args and "--address" not in ray_args:
        p.error("start: give --head, or --address HEAD (e.g. 127.0.0.1:6379) for a worker")
    if "--resources" in ray_args:
        value = ray_args[ray_args.index("--resources") + 1 :][:1]
        try:
            json.loads(value[0] if value else "")
        except json.JSONDecodeError:
            p.error(f"--resources must be a JSON object, e.g. '{{\"worker\": 1}}', got {value}")
    return start(ray_args)


if __name__ == "__main__":
    sys.exit(main())
