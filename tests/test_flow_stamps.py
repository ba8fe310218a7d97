"""A flow's stage stamps keep the digests of what each stage read and wrote (issue 58 item 1): a finished
stage whose output another command replaced, or whose input an earlier stage wrote differently, runs
again and says which file changed; a file only touched (same bytes) changes nothing."""
import json
import os

from trident.flow.stamp import Stages


def flow_of_two(out, runs, only=("make", "copy")):
    """Stage `make` writes OUT/a/part.txt from SOURCE; stage `copy` reads it and writes OUT/b.txt."""
    files = {"make": ([out / "source.txt"], [out / "a"]), "copy": ([out / "a"], [out / "b.txt"])}
    stages = Stages(out, total=2, files=lambda name: files[name])

    def make(resume):
        runs.append("make")
        (out / "a").mkdir(exist_ok=True)
        (out / "a" / "part.txt").write_text((out / "source.txt").read_text().upper())

    def copy(resume):
        runs.append("copy")
        (out / "b.txt").write_text((out / "a" / "part.txt").read_text())

    for name, key, output, work in (("make", "k1", out / "a" / "part.txt", make), ("copy", "k2", out / "b.txt", copy)):
        if name in only:
            stages.run(name, key, output.exists, work)


def test_a_replaced_output_or_a_changed_input_runs_the_stage_again_saying_so(tmp_path, capsys):
    (tmp_path / "source.txt").write_text("one hundred and twenty-seven documents")
    runs = []
    flow_of_two(tmp_path, runs)
    flow_of_two(tmp_path, runs)
    assert runs == ["make", "copy"] and capsys.readouterr().out.count("unchanged, skipped") == 2

    (tmp_path / "a" / "part.txt").write_text("1 document")  # another command replaced the stage's output
    flow_of_two(tmp_path, runs)
    said = capsys.readouterr().out
    assert runs[2:] == ["make"]  # made again as before: what `copy` read is what it reads now
    assert "== [1/2] make: its outputs changed since it ran (a/part.txt replaced); running it again ==" in said

    runs.clear()
    (tmp_path / "b.txt").write_text("ONE HUNDRED")  # copy's output replaced
    (tmp_path / "a" / "part.txt").write_text("changed again")  # and make's
    flow_of_two(tmp_path, runs)
    assert runs == ["make", "copy"]


def test_a_stage_reruns_when_an_earlier_stage_wrote_its_input_differently(tmp_path, capsys):
    (tmp_path / "source.txt").write_text("first")
    runs = []
    flow_of_two(tmp_path, runs, only=("make",))
    (tmp_path / "a" / "part.txt").write_text("written by someone else")
    flow_of_two(tmp_path, runs, only=("copy",))  # copy reads what another command wrote
    capsys.readouterr()
    flow_of_two(tmp_path, runs)  # make runs again (its output changed), so copy's input changes too
    assert runs == ["make", "copy", "make", "copy"]
    assert "copy: its inputs changed since it ran (a/part.txt replaced); running it again" in capsys.readouterr().out
    assert (tmp_path / "b.txt").read_text() == "FIRST"


def test_touched_files_and_stamps_of_an_older_trident_skip(tmp_path):
    (tmp_path / "source.txt").write_text("text")
    runs = []
    flow_of_two(tmp_path, runs)
    os.utime(tmp_path / "a" / "part.txt", ns=(1, 1))  # the same bytes, another mtime
    for name in ("make", "copy"):  # stamps written before digests were kept: trusted, digests added
        stamp = json.loads((tmp_path / ".flow" / f"{name}.json").read_text())
        (tmp_path / ".flow" / f"{name}.json").write_text(json.dumps({k: stamp[k] for k in ("key", "done", "time")}))
    flow_of_two(tmp_path, runs)
    assert runs == ["make", "copy"]
    assert "outputs" in json.loads((tmp_path / ".flow" / "make.json").read_text())
    (tmp_path / "a" / "part.txt").write_text("other")
    flow_of_two(tmp_path, runs)
    assert runs[2:] == ["make"]
