"""An elastic job (`trident train --nnodes 1:2`, torchrun's c10d rendezvous) loses one of its two
agents: the survivor re-rendezvouses, resumes from the last checkpoint with the smaller DP, and
finishes; the steps it re-ran after the loss match their first run within 1e-6."""
import json
import os
import signal

import numpy as np
import pytest

from train_fixtures import kill_all, start, tiny_corpus, train_command, wait_for_steps
from trident.train.launch import child_processes, free_port


@pytest.mark.timeout(240)
def test_a_lost_node_leaves_the_survivor_to_finish_on_a_smaller_dp(tmp_path):
    corpus, out, port = tiny_corpus(tmp_path), tmp_path / "run", free_port()

    def agent(hosts_store: bool):  # the first node hosts the rendezvous store: it is the one that stays
        conf = f"is_host={str(hosts_store).lower()},keep_alive_interval=1,keep_alive_max_attempt=2,last_call_timeout=1"
        elastic = ("--nnodes", "1:2", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "lost-node",
                   "--rdzv-conf", conf, "--max-restarts", "2")
        command = train_command(corpus, out, "train.steps=12", "checkpoint.save_interval=4", "checkpoint.load=auto",
                                "parallel.timeout_s=15", nproc=1, extra=elastic)
        # room to kill a node: from step 7 on the first round crawls (a second a forward), the resumed one runs at full speed
        return start(command, TRIDENT_INJECT="rank=0,step=7,kind=slow:1")

    second = agent(hosts_store=False)  # both start together, so the first round has both nodes
    first = agent(hosts_store=True)
    try:
        wait_for_steps(out, 6, first)
        for torchrun in child_processes(second.pid):  # the second node's agent dies, its rank with it
            os.kill(torchrun, signal.SIGKILL)
        lost = "".join(second.communicate(timeout=30))
        stdout, stderr = first.communicate(timeout=180)
        assert first.returncode == 0, stderr[-3000:]
        log = stdout + stderr + lost  # rank 0 of the first round may have been on either node
        assert "layout dp=2" in log and "layout dp=1" in log and "resumed from" in log
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        steps = [r["step"] for r in rows]
        restart = next(i for i in range(1, len(steps)) if steps[i] <= steps[i - 1])
        assert steps[-1] == 12 and steps[restart] % 4 == 1  # resumed right after a checkpoint
        rerun = {r["step"]: r["loss"] for r in rows[restart:]}
        before = [(r["loss"], rerun[r["step"]]) for r in rows[:restart] if r["step"] in rerun]
        assert before  # the steps run at dp 2 before the loss and again at dp 1 after it
        np.testing.assert_allclose(*zip(*before), rtol=1e-6)
    finally:
        kill_all(str(out))
