"""A tensor-parallel group spanning hosts is refused at start (exit 2 naming ranks and hosts) unless
parallel.allow_tp_across_hosts; every rank reports its host."""
import socket

import pytest

from distributed import run_distributed
from trident.parallel.hosts import describe_hosts, tp_groups_across_hosts


def test_tp_groups_that_span_hosts_are_found():
    hosts = ["a", "a", "b", "b"]
    assert tp_groups_across_hosts(hosts, dp=2, pp=1, tp=2) == []
    assert tp_groups_across_hosts(["a", "a", "a", "b"], dp=1, pp=1, tp=4) == [{0: "a", 1: "a", 2: "a", 3: "b"}]
    assert tp_groups_across_hosts(["a", "b", "a", "b"], dp=1, pp=2, tp=2) == [{0: "a", 1: "b"}, {2: "a", 3: "b"}]
    assert describe_hosts(["n1", "n1", "n2", "n2", "n1"]) == "2 hosts: n1 (ranks 0-1,4), n2 (ranks 2-3)"


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
