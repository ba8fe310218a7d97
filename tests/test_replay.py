"""Exact step replay: a logged step re-run from the checkpoint before it is bit-exact on the run's
layout and within 1e-6 on one CPU process; metrics.jsonl says which samples each step read."""
import json

import pytest

from distributed import run_distributed
from train_fixtures import tiny_corpus
from trident.cli import main


def _train(rank, world, root, out):
    from trident.config import load_config
    from trident.train.trainer import Trainer

    config = load_config("tiny", [f"data.paths=[{root}/data]", f"data.tokenizer={root}/tok.json", "parallel.dp=2",
                                  "train.steps=5", "checkpoint.save_interval=2", "train.peak_tflops=1"])
    Trainer(config, out, log=lambda *a: None).train()


def _replay(rank, world, out, step):
    from trident.train.replay import replay

    return replay(out, step, log=lambda *a: None)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tiny_corpus(tmp_path_factory.mktemp("replay"))
    run_distributed(_train, 2, str(root), str(root / "run"), timeout=90)
    return root / "run"


@pytest.mark.timeout(90)
def test_same_layout_is_bit_exact(run):
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["samples"] for r in records] == [[8 * i, 8] for i in range(5)]  # what each step read
    result = run_distributed(_replay, 2, str(run), 4, timeout=60)[0]
    assert result["from_checkpoint"].endswith("step_0000002") and [r["step"] for r in result["steps"]] == [3, 4]
    assert result["bit_exact"] and result["same_samples"] and result["loss"] == records[3]["loss"]


@pytest.mark.timeout(60)
def test_one_process_replays_a_dp2_step_within_1e_6(run, capsys):
    assert main(["replay", str(run), "--step", "5", "parallel.dp=0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["layout"] == {"dp": 1, "pp": 1, "tp": 1} and result["same_samples"]
    assert result["max_relative_difference"] < 1e-6
    assert result["loss"] == pytest.approx(result["logged_loss"], rel=1e-6)


def test_replay_refuses_what_it_cannot_do(run, capsys):
    assert main(["replay", str(run), "--step", "4"]) == 2  # a dp2 run on one process, no layout given
    assert "--nproc 2" in capsys.readouterr().err
    assert main(["replay", str(run), "--step", "9", "parallel.dp=0"]) == 2
    assert "no step 9" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_a_loss_spike_names_its_batch_documents_and_their_source_lines(tmp_path):
    import numpy as np

    from trident.config import load_config
    from trident.data.indexed import IndexedDataset
    from trident.train.trainer import Trainer

    root = tiny_corpus(tmp_path)
    # a factor of 0.5 treats every step after the 20-step window as a spike: the naming is what is tested
    config = load_config("tiny", [f"data.paths=[{root}/data]", f"data.tokenizer={root}/tok.json", "train.steps=21",
                                  "diagnostics.spike_factor=0.5", "train.peak_tflops=1"])
    logs = []
    trainer = Trainer(config, tmp_path / "run", log=logs.append)
    records = trainer.train()
    assert "spike" not in records[19] and "spike" in records[20]  # the first step with a full window
    spike = records[20]["spike"]
    first, count = records[20]["samples"]
    assert {d["sample"] for d in spike["documents"]} == set(range(first, first + count))
    lines = (root / "c.jsonl").read_text().splitlines()
    for doc in spike["documents"]:
        path, line = doc["source"].rsplit(":", 1)
        assert path == str(root / "c.jsonl") and 1 <= int(line) <= len(lines)
    sample = np.concatenate([IndexedDataset(d["prefix"]).get(d["document"], d["tokens"][0], d["tokens"][1] - d["tokens"][0])
                             for d in spike["documents"] if d["sample"] == first])
    assert (sample == trainer.train_data[first]).all()  # the spans are exactly the sample's tokens
    message = next(line for line in logs if line.startswith("loss spike at step 21"))
    assert f"{root / 'c.jsonl'}:" in message and f"trident replay {tmp_path / 'run'} --step 21" in message


@pytest.mark.timeout(60)
def test_data_which_traces_a_step_to_documents_and_a_document_to_steps(run, capsys):
    from trident.data.lineage import sample_documents
    from trident.train.which import training_stream

    assert main(["data", "which", str(run), "--step", "3", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["samples"] == [16, 8] and {d["sample"] for d in answer["documents"]} == set(range(16, 24))
    source = answer["documents"][0]["source"]
    assert main(["data", "which", str(run), "--doc", source, "--json"]) == 0
    steps = {s["step"]: s["samples"] for s in json.loads(capsys.readouterr().out)["steps"]}
    stream = training_stream(run)  # brute force: every logged sample's documents
    expected = {}
    for step in range(1, 6):
        for sample in range(8 * (step - 1), 8 * step):
            if any(d["source"] == source for d in sample_documents(stream, sample)):
                expected.setdefault(step, []).append(sample)
    assert steps == expected and 3 in steps
    assert main(["data", "which", str(run), "--doc", "nowhere.jsonl:1"]) == 2


@pytest.mark.timeout(60)
def test_a_takedown_removes_documents_and_training_never_sees_them(run, capsys):
    import numpy as np

    from trident.config import load_config
    from trident.data.build import build_datasets
    from trident.data.indexed import IndexedDataset
    from trident.data.lineage import batch_documents

    root = run.parent
    (root / "ids.txt").write_text(f"# takedown request 7\n{root / 'c.jsonl'}:3\n{root / 'data'}:5\n7\nnowhere.jsonl:1\n")
    assert main(["data", "remove", "--prefix", str(root / "data"), "--ids", str(root / "ids.txt"),
                 "--out", str(root / "clean"), "--run", str(run), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    before, after = IndexedDataset(root / "data"), IndexedDataset(root / "clean")
    assert report["removed_documents"] == [2, 5, 7] and report["not_found_ids"] == ["nowhere.jsonl:1"]
    assert report["tokens_removed"] == int(before.sizes[[2, 5, 7]].sum()) and len(after) == len(before) - 3
    kept = [d for d in range(len(before)) if d not in (2, 5, 7)]
    assert all(np.array_equal(after.get(i), before.get(d)) for i, d in enumerate(kept))
    assert set(report["run_steps"]) == {"2", "5", "7"}  # the steps of the run that read each one
    gone = {f"{root / 'c.jsonl'}:{d + 1}" for d in (2, 5, 7)}  # one document a line in this corpus
    config = load_config("tiny", [f"data.paths=[{root / 'clean'}]", f"data.tokenizer={root / 'tok.json'}"])
    train, _ = build_datasets(config.data, 32, 400, 0, 1234)
    seen = {d["source"] for d in batch_documents(train, 0, 400, limit=None)}
    assert len(seen) > 50 and not seen & gone  # the new prefix's indices hold no removed document
    assert main(["data", "remove", "--prefix", str(root / "data"), "--ids", str(root / "ids.txt"),
                 "--out", str(root / "clean")]) == 2  # never overwrites
    assert "already exists" in capsys.readouterr().err


def test_curation_ids_and_urls_name_documents_from_tokenize_to_takedown(tmp_path, capsys):
    from trident.data.build import tokenize_files
    from trident.data.indexed import IndexedDataset
    from trident.data.lineage import find_document

    root = tiny_corpus(tmp_path)
    records = [{"id": f"crawl.warc.gz:{i}", "url": f"https://example.org/{i}", "text": f"alpha beta {i} " * 30}
               for i in range(6)]
    (root / "curated.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    tokenize_files([root / "curated.jsonl"], root / "cur", root / "tok.json", progress=False)
    assert find_document(root / "cur", "crawl.warc.gz:4") == 4
    assert find_document(root / "cur", "https://example.org/2") == 2
    assert find_document(root / "cur", f"{root / 'curated.jsonl'}:6") == 5 and find_document(root / "cur", "x:y") is None
    (root / "ids.txt").write_text("crawl.warc.gz:1\nhttps://example.org/3\n")
    assert main(["data", "remove", "--prefix", str(root / "cur"), "--ids", str(root / "ids.txt"),
                 "--out", str(root / "cur2"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed_documents"] == [1, 3]
    assert len(IndexedDataset(root / "cur2")) == 4 and find_document(root / "cur2", "crawl.warc.gz:4") == 2
