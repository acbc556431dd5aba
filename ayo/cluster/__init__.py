"""Where engine instances run: a placement per instance (this process, or a Ray actor on the node
holding some resources), joining a Ray cluster, and starting one on this machine.

An engine's placement is one entry or a list of them (replicas behind one engine scheduler)::

    app.add_engine("llm", make_llm, kind="llm",
                   placement=[Placement.LOCAL, Placement(resources={"gpu_node": 0.5})])

and in the server's ``--config`` file, with the cluster's address::

    {"ray_address": "10.0.0.1:6379",
     "placement": {"llm": ["local", {"resources": {"gpu_node": 0.5}, "num_cpus": 4}]}}

A one-machine cluster that talks only over 127.0.0.1 (trials, tests), each node in the
foreground until Ctrl-C::

    python -m ayo.cluster head --port 6379 --num-cpus 0
    python -m ayo.cluster worker --address 127.0.0.1:6379 --num-cpus 2 --resources '{"worker": 1}'
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

log = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


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
        known = [f.name for f in fields(cls) if f.name != "local"]  # a config's keys
        entries = value if isinstance(value, list) else [value]
        if not entries:
            raise ValueError(f"placement of {engine!r}: give at least one instance")
        out = []
        for entry in entries:
            if entry == "local":
                out.append(cls.LOCAL)
            elif isinstance(entry, dict):
                unknown = sorted(set(entry) - set(known))
                if unknown:
                    raise ValueError(f"placement of {engine!r}: unknown keys {unknown}; "
                                     f"known: {known}")  # fmt: skip
                try:
                    out.append(cls(**entry))
                except ValueError as exc:
                    raise ValueError(f"placement of {engine!r}: {exc}") from None
            else:
                raise ValueError(f"placement of {engine!r}: each instance is \"local\" or an "
                                 f"object with {known}, got {entry!r}")  # fmt: skip
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
    one (or ``local``, an engine already built), a :class:`~ayo.cluster.remote.RemoteEngine` building
    ``factory()`` on its node for a remote one (``factory`` must then be picklable: a
    module-level function or a ``functools.partial`` of one)."""
    from ayo.cluster.remote import RemoteEngine
    from ayo.scheduler import KINDS

    if kind not in KINDS:
        raise ValueError(f"engine {name!r}: a placed engine needs kind= one of {KINDS}")
    items = [placements] if isinstance(placements, Placement) else list(placements)
    if not items:
        raise ValueError(f"engine {name!r}: give at least one placement")
    instances = []
    for p in items:
        if p.local:
            instances.append(factory() if local is None else local)
        else:
            instances.append(RemoteEngine(factory, kind, resources=dict(p.resources),
                                          num_cpus=p.num_cpus, max_restarts=p.max_restarts))  # fmt: skip
    return instances


def is_loopback_address(address: str) -> bool:
    """Whether a Ray address (``host:port``) is on this machine's loopback."""
    return is_loopback(address.rpartition(":")[0] or address)


def connect(address: str) -> Any:
    """Join the Ray cluster at ``address`` as its driver (``ray.init``). A loopback address is
    joined under :func:`ayo.cluster.remote.loopback_environment` (node address 127.0.0.1, nothing
    beyond it); another address by Ray's own discovery of this node's address. The caller's
    SIGTERM handler stays (``ray.init`` replaces it with ``sys.exit``, which would skip a
    server's drain)."""
    import signal
    import threading

    from ayo.cluster.remote import LOOPBACK, _ray, loopback_environment

    ray = _ray()
    if ray.is_initialized():
        return ray.get_runtime_context()
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        if is_loopback_address(address):
            with loopback_environment():
                return ray.init(address=address, _node_ip_address=LOOPBACK, log_to_driver=False)
        return ray.init(address=address, log_to_driver=False)
    finally:
        if threading.current_thread() is threading.main_thread():  # where handlers are set
            signal.signal(signal.SIGTERM, sigterm)


def disconnect() -> None:
    """Leave the Ray cluster :func:`connect` joined (its nodes keep running)."""
    from ayo.cluster.remote import _ray

    _ray().shutdown()
