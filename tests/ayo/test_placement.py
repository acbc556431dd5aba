"""Placements (``ayo.cluster``): parsed from the server's config with clear errors, local ones
built in process by ``App.add_engine(..., placement=)``; the cluster CLI's argument errors.
Nothing here needs Ray (tests/remote/ runs engines on Ray nodes)."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest

from ayo.cluster import Placement, is_loopback_address
from ayo.runtime.app import App
from ayo.scheduler.sim.fakes import fake_engine, fake_engines
from ayo.server.__main__ import build_parser, load_config
from ayo.server.config import ServerConfig


def test_placement_entries_parse_and_faults_name_the_engine():
    remote = {"resources": {"gpu_node": 0.5}, "num_cpus": 4}
    assert Placement.parse("llm", "local") == [Placement.LOCAL]
    assert Placement.parse("llm", ["local", remote]) == [
        Placement.LOCAL, Placement(resources={"gpu_node": 0.5}, num_cpus=4)]  # fmt: skip
    assert Placement.parse("llm", remote)[0].to_json() == {**remote, "max_restarts": 1}
    for value, needle in (
        ([], "at least one"),
        ("gpu", 'is "local" or an object'),
        ({"resource": {"a": 1}}, "unknown keys ['resource']"),
        ({"resources": {"a": 0}}, "positive amounts"),
        ({"resources": {"a": "1"}}, "positive amounts"),
        ({"num_cpus": -1}, "num_cpus"),
        ({"max_restarts": 1.5}, "max_restarts"),
    ):
        with pytest.raises(ValueError, match="placement of 'llm'") as err:
            Placement.parse("llm", value)
        assert needle in str(err.value)


def test_server_config_checks_the_placement():
    remote = {"resources": {"worker": 0.5}}
    config = ServerConfig.build(ray_address="127.0.0.1:6379", placement={"llm": ["local", remote]})
    assert config.remote_placed and len(config.placements()["llm"]) == 2
    assert not ServerConfig.build(placement={"embedder": "local"}).remote_placed
    faults = (
        ({"placement": {"llm": remote}}, "give ray_address"),
        ({"placement": {"index": "local"}}, "unknown engines ['index']"),
        ({"placement": {"llm": ["local", "local"]}}, "one local instance"),
        ({"placement": ["llm"]}, "must be of type"),
    )
    for options, needle in faults:
        with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            ServerConfig.build(**options)


def test_placement_flag_and_file(tmp_path):
    args = build_parser().parse_args(["--placement", '{"embedder": "local"}', "--ray-address",
                                      "127.0.0.1:1"])  # fmt: skip
    config = load_config(args)
    assert config.placement == {"embedder": "local"} and config.ray_address == "127.0.0.1:1"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--placement", "[1]"])  # argparse: must be a JSON object
    path = tmp_path / "server.json"
    path.write_text('{"placement": {"llm": {"resources": {"w": 1}}}}')
    with pytest.raises(ValueError, match="give ray_address"):
        load_config(build_parser().parse_args(["--config", str(path)]))


async def test_add_engine_with_local_placements_builds_replicas_in_process():
    app, ref = App(), App.fake()
    for name, engine in fake_engines().items():
        if name == "embedder":
            factory = functools.partial(fake_engine, "embedder")
            app.add_engine(name, factory, kind="embedder",
                           placement=[Placement.LOCAL, Placement.LOCAL])  # fmt: skip
        else:
            app.add_engine(name, engine)
    replicas = app.engines.instances("embedder")
    assert len(replicas) == 2 and replicas[0] is not replicas[1]
    async with app, ref:
        q = {"question": "why do stars shine"}
        assert (await app.run("naive_rag", q)).outputs == (await ref.run("naive_rag", q)).outputs
        health = await app.engines.health()
    rows = [r for r in health if r["engine"] == "embedder"]
    assert [(r["instance"], r["where"], r["state"]) for r in rows] == [
        ("embedder#0", "local", "alive"), ("embedder#1", "local", "alive")]  # fmt: skip
    with pytest.raises(ValueError, match="give a factory"):
        App().add_engine("embedder", fake_engine("embedder"), placement=Placement.LOCAL)


def test_loopback_addresses():
    assert is_loopback_address("127.0.0.1:6379") and is_loopback_address("localhost:6379")
    assert not is_loopback_address("10.0.0.1:6379")


def test_cluster_cli_checks_its_arguments():
    for args, needle in (
        (["worker", "--address", "10.0.0.1:6379"], "runs loopback clusters"),
        (["worker", "--address", "127.0.0.1:1", "--resources", "{worker: 1}"], "not valid JSON"),
        (["head", "--resources", '{"worker": 0}'], "positive amounts"),
        (["start", "--head"], "invalid choice: 'start'"),
    ):
        out = subprocess.run([sys.executable, "-m", "ayo.cluster", *args], capture_output=True,
                             text=True, timeout=60)  # fmt: skip
        assert out.returncode == 2 and needle in out.stderr, (args, out.stderr)
