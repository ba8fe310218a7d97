"""What every rank, launcher and CLI run pays at start-up: importing the trainer leaves torch._dynamo
unimported (~2 s a process on this VM; only a run with train.compile=true needs it, and imports it then)."""
import subprocess
import sys


def test_the_trainer_imports_without_torch_dynamo():
    code = "import sys, trident.train.trainer, trident.cli; print(sorted(m for m in sys.modules if m.startswith('torch._dynamo')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
