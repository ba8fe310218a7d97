"""A tensor-parallel (or context-parallel) group spanning hosts is refused at start (exit 2 naming ranks
and hosts) unless parallel.allow_tp_across_hosts (allow_cp_across_hosts); every rank reports its host."""
import socket

import pytest

from distributed import run_distributed
from trident.config import ConfigError, ParallelConfig
from trident.parallel import hosts as host_check
from trident.parallel.hosts import check_hosts, describe_hosts, groups_across_hosts
from trident.parallel.mesh import Mesh


def test_tp_groups_that_span_hosts_are_found():
    hosts = ["a", "a", "b", "b"]
    assert groups_across_hosts(hosts, "tp", dp=2, pp=1, tp=2) == []
    assert groups_across_hosts(["a", "a", "a", "b"], "tp", dp=1, pp=1, tp=4) == [{0: "a", 1: "a", 2: "a", 3: "b"}]
    assert groups_across_hosts(["a", "b", "a", "b"], "tp", dp=1, pp=2, tp=2) == [{0: "a", 1: "b"}, {2: "a", 3: "b"}]
    assert describe_hosts(["n1", "n1", "n2", "n2", "n1"]) == "2 hosts: n1 (ranks 0-1,4), n2 (ranks 2-3)"


def test_cp_groups_that_span_hosts_are_found():
    # cp2 x tp2 on hosts of 2 processes: each TP group is on one host, each CP group (ranks tp apart) is not
    hosts = ["a", "a", "b", "b"]
    assert groups_across_hosts(hosts, "tp", dp=1, pp=1, tp=2, cp=2) == []
    assert groups_across_hosts(hosts, "cp", dp=1, pp=1, tp=2, cp=2) == [{0: "a", 2: "b"}, {1: "a", 3: "b"}]
    assert groups_across_hosts(hosts, "cp", dp=2, pp=1, tp=1, cp=2) == []  # the TP x CP block fits a host
    assert groups_across_hosts(hosts, "cp", dp=4, pp=1, tp=1) == []  # cp = 1: no CP groups


def test_check_refuses_cp_across_hosts_unless_allowed(monkeypatch):
    monkeypatch.setattr(host_check, "gather_hosts", lambda: ["a", "a", "b", "b"])
    mesh = Mesh(dp=1, pp=1, tp=2, cp=2)
    with pytest.raises(ConfigError) as refused:
        check_hosts(mesh, ParallelConfig(tp=2, cp=2), log=lambda *a: None)
    message = str(refused.value)
    assert "parallel.cp=2: 2 context-parallel group(s)" in message and "rank 0 on a, rank 2 on b" in message
    assert "make cp x tp divide" in message and "parallel.allow_cp_across_hosts=true" in message, message
    allowed = ParallelConfig(tp=2, cp=2, allow_cp_across_hosts=True)
    assert check_hosts(mesh, allowed, log=lambda *a: None) == ["a", "a", "b", "b"]
    with pytest.raises(ConfigError, match="allow_tp_across_hosts"):  # TP's own key still guards TP groups
        check_hosts(Mesh(dp=1, pp=1, tp=4), ParallelConfig(tp=4, allow_cp_across_hosts=True), log=lambda *a: None)


def _start_on_two_hosts(rank, world, allow):
    from train_fixtures import VOCAB, RandomTokens, tiny_config
    from trident.config import ConfigError
    from trident.train.trainer import Trainer

    socket.gethostname = lambda: f"node{rank}"  # this rank runs on its own host
    config = tiny_config("parallel.tp=2", f"parallel.allow_tp_across_hosts={allow}")
    try:
        Trainer(config, "/tmp/unused-hosts", datasets=(RandomTokens(32), None), vocab_size=VOCAB, log=lambda *a: None)
    except ConfigError as error:
        return str(error)
    return "started"


@pytest.mark.timeout(60)
def test_trainer_refuses_tp_across_hosts_unless_allowed():
    refused = run_distributed(_start_on_two_hosts, 2, False, timeout=50)
    assert all("rank 0 on node0, rank 1 on node1" in m and "allow_tp_across_hosts" in m for m in refused), refused
    assert run_distributed(_start_on_two_hosts, 2, True, timeout=50) == ["started", "started"]
