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

import argparse
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
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
    one (or ``local``, an engine already built), a :class:`~ayo.remote.RemoteEngine` building
    ``factory()`` on its node for a remote one (``factory`` must then be picklable: a
    module-level function or a ``functools.partial`` of one)."""
    from ayo.remote import RemoteEngine
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
    from ayo.server.config import is_loopback

    return is_loopback(address.rpartition(":")[0] or address)


def connect(address: str) -> Any:
    """Join the Ray cluster at ``address`` as its driver (``ray.init``). A loopback address is
    joined under :func:`ayo.remote.loopback_environment` (node address 127.0.0.1, nothing
    beyond it); another address by Ray's own discovery of this node's address. The caller's
    SIGTERM handler stays (``ray.init`` replaces it with ``sys.exit``, which would skip a
    server's drain)."""
    import signal
    import threading

    from ayo.remote import LOOPBACK, _ray, loopback_environment

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


def run_node(
    address: str | None = None,
    port: int = 6379,
    num_cpus: int | None = None,
    resources: Mapping[str, float] | None = None,
    object_store_mb: int = 200,
    ready: Callable[[str], None] = lambda _: None,
) -> None:
    """A node of a one-machine cluster on 127.0.0.1, in the foreground until SIGTERM or
    Ctrl-C (which stop its processes): the head on ``port`` (``address`` None), else a worker
    joining the head at ``address``. ``ready`` gets the head's address once the node is up.

    Started as ``ray.cluster_utils`` starts nodes (Ray's ``Node``), under
    :func:`ayo.remote.loopback_environment`: Ray's CLI cannot run a worker over loopback (``ray
    start --address`` refuses without ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1``, and with it,
    resolves 127.0.0.1 to the machine's address by a UDP connect to 8.8.8.8)."""
    import signal
    import threading

    from ray._private.node import Node
    from ray._private.parameter import RayParams

    from ayo.remote import LOOPBACK, _ray, loopback_environment

    _ray()  # a clear error without the extra
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with loopback_environment() as env:
        params = {"node_ip_address": LOOPBACK, "num_cpus": num_cpus, "num_gpus": 0,
                  "resources": dict(resources or {}), "temp_dir": env["RAY_TMPDIR"],
                  "object_store_memory": object_store_mb * 2**20, "min_worker_port": 0,
                  "max_worker_port": 0}  # fmt: skip
        if address is None:
            params.update(gcs_server_port=port, include_dashboard=False)
        else:  # as cluster_utils adds a node beside the head: its own ports, no log monitor
            params.update(gcs_address=address, include_log_monitor=False, node_manager_port=0,
                          dashboard_agent_listen_port=None)  # fmt: skip
        node = Node(RayParams(**params), head=address is None, shutdown_at_exit=True,
                    spawn_reaper=True)  # fmt: skip
        ready(node.gcs_address)
        stop.wait()  # SIGTERM: Ray's own handler stops the node's processes and exits


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m ayo.cluster",
        description="Run a node of a Ray cluster on this machine that talks only over "
        "127.0.0.1, in the foreground (Ctrl-C or SIGTERM stops it). Across machines use "
        "Ray's own `ray start` (see README).",
    )
    sub = p.add_subparsers(dest="role", required=True)
    head = sub.add_parser("head", help="the head node (its address: 127.0.0.1:PORT)")
    head.add_argument("--port", type=int, default=6379, help="the head's port (default 6379)")
    worker = sub.add_parser("worker", help="a worker node joining a head")
    worker.add_argument("--address", required=True, help="the head's address, 127.0.0.1:PORT")
    for node in (head, worker):
        node.add_argument("--num-cpus", type=int, default=None,
                          help="CPUs the node offers to actors (default: all cores)")  # fmt: skip
        node.add_argument("--resources", type=_resources, default={},
                          help="custom resources as JSON, e.g. '{\"worker\": 1}'")  # fmt: skip
        node.add_argument("--object-store-mb", type=int, default=200)
    args = p.parse_args(argv)
    if args.role == "worker" and not is_loopback_address(args.address):
        p.error(f"--address {args.address}: this command runs loopback clusters; join a "
                "cluster across machines with `ray start --address`")  # fmt: skip
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    role = args.role
    run_node(
        None if role == "head" else args.address,
        getattr(args, "port", 6379),
        args.num_cpus,
        args.resources,
        args.object_store_mb,
        lambda gcs: log.info(
            "ray %s node up; the cluster's address: %s (Ctrl-C stops it)", role, gcs
        ),
    )
    return 0


def _resources(text: str) -> dict[str, float]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from None
    try:
        return dict(Placement(resources=value).resources)  # its check, with its message
    except ValueError:
        raise argparse.ArgumentTypeError('must be a JSON object of positive amounts, e.g. '
                                         '\'{"worker": 1}\'') from None  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
