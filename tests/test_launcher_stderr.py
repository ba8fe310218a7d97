"""`trident train --nproc N`'s launcher passes its ranks' stderr on until one rank leaves its failure
record; what follows (mostly the peers repeating that failure) used to be dropped, an unrelated traceback
with it: it is kept in a local file that the failure's line names."""
import sys
import textwrap

from trident.train.launch import first_failure, later_stderr, relaunch_with_torchrun

# a stand-in for torchrun and its ranks, as a real process: a line, a rank's failure record (leave_failure,
# through the folder the launcher passes in TRIDENT_FAILURES), then a peer's repeat and an unrelated traceback
RANKS = textwrap.dedent("""
    import sys, time
    from trident.train.launch import leave_failure
    print("rank 1: step 3 done", file=sys.stderr, flush=True)
    time.sleep(1.0)  # the launcher's relay passes this line on before the record exists
    leave_failure("error: s3://bucket/run/checkpoints/step_0000004: rank 0: unreachable (...)", 11)
    print("rank 1: peer rank 0 is gone", file=sys.stderr, flush=True)
    print("Traceback (most recent call last):\\n  File 'x.py', line 1\\nZeroDivisionError: rank 1's own bug",
          file=sys.stderr, flush=True)
    sys.exit(1)
""")


def test_stderr_after_a_failure_record_is_kept_in_a_file_the_line_names(tmp_path, capfd):
    failures = tmp_path / "trident-failures-x"
    failures.mkdir()
    code, _ = relaunch_with_torchrun([sys.executable, "-c", RANKS], failures)
    shown = capfd.readouterr().err
    assert code == 1 and "rank 1: step 3 done" in shown
    assert "peer rank 0 is gone" not in shown and "ZeroDivisionError" not in shown  # the line is printed once
    failed = first_failure(failures)
    kept = later_stderr(failures)
    assert failed["code"] == 11 and failed["line"].startswith("error: s3://bucket/run/checkpoints/step_0000004")
    assert f"stderr after it, 4 lines, is kept in {kept}" in failed["line"]
    text = kept.read_text()
    assert "peer rank 0 is gone" in text and "ZeroDivisionError: rank 1's own bug" in text
    assert kept.parent == failures.parent  # outside the failures folder, which the launcher removes


def test_no_file_without_a_failure_record(tmp_path, capfd):
    failures = tmp_path / "trident-failures-y"
    failures.mkdir()
    code, _ = relaunch_with_torchrun([sys.executable, "-c", "import sys; print('fine', file=sys.stderr)"], failures)
    assert code == 0 and "fine" in capfd.readouterr().err
    assert first_failure(failures) is None and not later_stderr(failures).exists()
