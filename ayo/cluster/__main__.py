"""``python -m ayo.cluster head|worker``: a node of a Ray cluster on this machine that talks only
over 127.0.0.1, in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Mapping, Sequence

from ayo.cluster import Placement, is_loopback_address

log = logging.getLogger("ayo.cluster")


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
    :func:`ayo.cluster.remote.loopback_environment`: Ray's CLI cannot run a worker over loopback (``ray
    start --address`` refuses without ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=1``, and with it,
    resolves 127.0.0.1 to the machine's address by a UDP connect to 8.8.8.8)."""
    import signal
    import threading

    from ray._private.node import Node
    from ray._private.parameter import RayParams

    from ayo.cluster.remote import LOOPBACK, _ray, loopback_environment

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
