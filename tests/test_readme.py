"""The README stays a front page: under 15,000 characters, and its set-up commands tell a CPU-only
user how to install torch without the CUDA build (pypi.org's Linux wheel pulls ~20 nvidia-* packages)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_readme_is_under_15000_characters():
    assert len(README) < 15000, f"README.md is {len(README):,} characters; move detail to docs/"


def test_set_up_names_the_cpu_wheel_index():
    set_up = README[README.index("## Set up"):README.index("\n## ", README.index("## Set up") + 1)]
    assert "pip install torch==2.13.0" in set_up
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in set_up


def test_ci_runs_the_readme_test_command():
    """.ci/run installs torch and trident, then runs exactly the README's pytest command."""
    ci = (ROOT / ".ci" / "run").read_text()
    command = next(line for line in README.splitlines() if "pytest" in line and line.startswith("pip install"))
    assert command.split(" && ")[-1] in ci
