"""`trident launch`: the sbatch script a multi-node run needs, derived from the config and its plan."""
from trident.cli import main

MTNLG = ["mtnlg-530b", "model.vocab_size=50257"]


def test_script_has_rendezvous_signal_requeue_and_the_train_command(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["launch", *MTNLG, "--nodes", "280", "--gpus-per-node", "8", "--partition", "batch",
                 "--time", "2-00:00:00", "--out", str(out)]) == 0
    script = (out / "launch.sbatch").read_text()
    assert f"sbatch {out / 'launch.sbatch'}" in capsys.readouterr().out
    for line in ("#SBATCH --nodes=280", "#SBATCH --gpus-per-node=8", "#SBATCH --partition=batch",
                 "#SBATCH --time=2-00:00:00", "#SBATCH --requeue", "export TORCH_NCCL_ASYNC_ERROR_HANDLING=2",
                 '--rdzv-endpoint "$HEAD:29500" --rdzv-id "$SLURM_JOB_ID"', 'scontrol requeue "$SLURM_JOB_ID"', f'[ {out}/preempted.json -nt "$STARTED" ]'):
        assert line in script, line
    assert "trident train mtnlg-530b model.vocab_size=50257 checkpoint.load=auto" in script
    assert "--nproc 8 --nnodes 280 --max-restarts 3" in script and "tp8 pp35 dp8" in script
    lead = int(script.split("#SBATCH --signal=USR1@")[1].split()[0])
    assert lead >= 120 and lead % 60 == 0  # two plan steps and a save ahead of the time limit


def test_elastic_script_keeps_the_job_when_a_node_is_lost(capsys):
    assert main(["launch", "gpt-125m", "model.vocab_size=50257", "--nodes", "4", "--min-nodes", "2",
                 "--gpus-per-node", "8", "--dry-run"]) == 0
    script = capsys.readouterr().out
    assert "--nnodes 2:4" in script and "#SBATCH --no-kill" in script and "srun --no-kill --kill-on-bad-exit=0" in script


def test_refuses_tp_across_nodes_and_layouts_that_do_not_fit(capsys):
    assert main(["launch", *MTNLG, "--nodes", "280", "--gpus-per-node", "4", "--dry-run"]) == 2
    assert "parallel.tp=8 does not divide --gpus-per-node 4" in capsys.readouterr().err
    assert main(["launch", *MTNLG, "parallel.pp=1", "parallel.tp=8", "--nodes", "1", "--gpus-per-node", "8",
                 "--dry-run"]) == 2
    assert "GiB per GPU" in capsys.readouterr().err


def test_the_folder_the_script_prepared_is_one_train_accepts(tmp_path, capsys):
    """launch.sbatch, Slurm's log and NCCL's dump folder are in OUT before the first rank starts."""
    from trident.train.run_folder import claim_train_folder
    from trident.config import load_config
    from trident.data.run_folder import RunFolder

    out = tmp_path / "run"
    assert main(["launch", *MTNLG, "--nodes", "280", "--gpus-per-node", "8", "--out", str(out)]) == 0
    (out / "slurm-123.out").write_text("")
    (out / "debug" / "nccl").mkdir(parents=True)
    config = load_config("mtnlg-530b", ["model.vocab_size=50257", "checkpoint.load=auto"])
    claim_train_folder(config, RunFolder(out, "train", "rdzv:123"), overwrite=False, writer=True)  # no OutputFolderError


def test_multi_node_train_needs_a_rendezvous(tmp_path, capsys):
    assert main(["train", "tiny", "--nnodes", "2", "--out", str(tmp_path / "run")]) == 2
    assert "--rdzv-endpoint" in capsys.readouterr().err


def test_the_launcher_starts_torchrun_without_loading_torch(tmp_path):
    """`trident train --nproc N` only spawns torchrun: loading torch there would cost every launch seconds."""
    import subprocess
    import sys

    script = f"""
import sys, time
import trident.train.launch as launch
seen = []
launch.relaunch_with_torchrun = lambda command, failures=None: (seen.append(command), (0, time.time()))[1]
from trident.cli import main
code = main(["train", "tiny", "parallel.dp=2", "--nproc", "2", "--out", {str(tmp_path / 'run')!r}])
assert code == 0 and "torch.distributed.run" in seen[0], (code, seen)
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
assert not loaded, loaded[:5]
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_free_port_lies_below_the_kernels_automatic_ports_and_can_be_bound():
    """An automatic port could go to any outgoing connection before the rendezvous store binds it."""
    import socket
    from pathlib import Path

    from trident.train.launch import free_port

    ranges = Path("/proc/sys/net/ipv4/ip_local_port_range")
    start = int(ranges.read_text().split()[0]) if ranges.exists() else 49152
    for _ in range(20):
        port = free_port()
        assert 1024 <= port < start
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # still free
