"""Object storage: every path a user gives may be an fsspec URL. Tested against a local S3 server
(moto) started on a free 127.0.0.1 port: checkpoints saved, resumed and resharded on s3 with each
rank's bytes read counted; data tokenized from s3 and trained on from s3; a WARC curated s3 to s3."""
import json

import numpy as np
import pytest

from distributed import run_distributed
from train_fixtures import STOP, run_steps
from trident.checkpoint.reader import complete_checkpoints
from trident.text.storage import location

SMALL = ["model.num_layers=1"]  # few tensors: the local S3 server costs ~10 ms of this machine's CPU a request


def _resume_on_rank(rank, world, overrides, out_dir, load):
    """(losses after resuming, bytes of tensor files this rank read, its share of the checkpoint)."""
    from trident.parallel.state import TENSOR_KINDS

    losses, trainer = run_steps(overrides, out_dir, load=load, ckpt=f"{out_dir}/ckpt", with_trainer=True)
    share = sum(piece.tensor.numel() * piece.tensor.element_size() for piece in trainer.model.state_pieces()
                if piece.kind in TENSOR_KINDS)  # weights and owned Adam ranges, as loaded
    return losses, trainer.resume_bytes, share


@pytest.mark.timeout(240)
def test_checkpoints_save_resume_and_reshard_on_s3(s3, tmp_path):
    whole = run_steps(SMALL, tmp_path / "whole")
    root = s3.url("run-a/ckpt")
    first = run_steps([*SMALL, "checkpoint.async_save=true"], tmp_path / "a", stop=STOP, ckpt=root)
    saved = complete_checkpoints(root)
    assert [p.name for p in saved] == [f"step_{STOP:07d}"]
    assert (location(root) / "latest").read_text() == saved[0].name
    assert not s3.fs.glob(f"{root}/.tmp*")  # written in place, committed by COMPLETE
    resumed, trainer = run_steps(SMALL, tmp_path / "b", load="auto", ckpt=root, with_trainer=True)
    assert first + resumed == whole  # bit-exact through s3

    results = run_distributed(_resume_on_rank, 2, [*SMALL, "parallel.tp=2"], str(tmp_path / "c"), str(saved[0]),
                              timeout=150)
    np.testing.assert_allclose(first + results[0][0], whole, rtol=1e-5)  # resharded tp1 -> tp2
    for rank, (_, read, share) in enumerate(results):
        assert 0 < read <= 1.25 * share, (rank, read, share)  # range reads of its own tiles only
    assert trainer.resume_bytes > 0


def test_prefetch_fetches_touching_spans_as_one_ranged_get_and_no_byte_outside_them(monkeypatch):
    import fsspec

    from trident.text import storage

    data = bytes(range(256)) * 40
    fsspec.filesystem("memory").pipe("/prefetch/blob", data)  # an object store in this process
    monkeypatch.setattr(storage, "MERGED_GET_BYTES", 1000)
    memory, gets = fsspec.filesystem("memory"), []
    fetch = memory.cat_ranges
    record = lambda fs, paths, starts, ends: gets.append(list(zip(starts, ends))) or fetch(paths, starts, ends)
    monkeypatch.setattr(type(memory), "cat_ranges", record)
    # three touching rows, an overlap, a gap, a run past the 1000-byte limit, one past the end of the object
    spans = [(200, 100), (100, 100), (0, 100), (250, 100), (500, 10), (600, 900), (1500, 400), (10200, 100)]
    with storage.RangeReader("memory://prefetch/blob") as reader:
        reader.prefetch(spans)
        assert gets == [[(0, 350), (500, 510), (600, 1500), (1500, 1900), (10200, 10240)]]
        assert reader.bytes_read == 350 + 10 + 900 + 400 + 40
        for offset, length in spans:  # served from the fetched blocks: bytes_read does not grow
            reader.seek(offset)
            if length == 10:
                buffer = bytearray(10)
                assert reader.readinto(buffer) == 10 and bytes(buffer) == data[500:510]
            else:
                assert reader.read(length) == data[offset:offset + length], (offset, length)
        assert reader.bytes_read == 350 + 10 + 900 + 400 + 40
    assert len(gets) == 1 and storage.merged_gets([], 10) == []
    memory.rm("/prefetch/blob")


def _train_losses(out, data, tokenizer):
    from trident.config import load_config
    from trident.train.metrics import read_metrics
    from trident.train.trainer import Trainer

    config = load_config("tiny", [f"data.paths=[{data}]", f"data.tokenizer={tokenizer}", "train.steps=3",
                                  "logging.log_interval=1", "train.eval_interval=0", "model.num_layers=1"])
    Trainer(config, out, log=lambda *a: None).train()
    return [record["loss"] for record in read_metrics(out / "metrics.jsonl") if "loss" in record]


@pytest.mark.timeout(180)
def test_tokenize_from_s3_to_s3_take_down_and_train_reading_s3(s3, tmp_path, monkeypatch):
    from train_fixtures import tiny_corpus
    from trident.data.build import tokenize_files
    from trident.data.takedown import remove_documents

    monkeypatch.setenv("TRIDENT_CACHE", str(tmp_path / "cache"))
    local = tiny_corpus(tmp_path)
    for name in ("c.jsonl", "tok.json"):
        s3.fs.put_file(str(local / name), s3.url(f"corpus/{name}"))
    prefix = s3.url("tokens/data")
    stats = tokenize_files([s3.url("corpus/c.jsonl")], prefix, s3.url("corpus/tok.json"), progress=False)
    assert stats["output_prefix"] == prefix and stats["inputs"] == [s3.url("corpus/c.jsonl")]
    for suffix in (".bin", ".idx", ".doc_lines.npy"):  # the same dataset as tokenized from local files
        assert s3.fs.cat_file(f"{prefix}{suffix}") == (local / f"data{suffix}").read_bytes(), suffix
    assert not list((tmp_path / "cache").glob("**/*.bin"))  # the tokens were never copied whole
    (tmp_path / "ids.txt").write_text("0\n")
    report = remove_documents(prefix, tmp_path / "ids.txt", s3.url("tokens/data-v2"))  # a takedown, s3 to s3
    assert report["documents_removed"] == 1 and report["documents"] == stats["documents"] - 1
    assert json.loads(s3.fs.cat_file(s3.url("tokens/data-v2.removal.json")))["removed_documents"] == [0]

    remote = _train_losses(tmp_path / "remote", prefix, s3.url("corpus/tok.json"))
    assert remote == _train_losses(tmp_path / "here", local / "data", local / "tok.json")
    assert len(remote) == 3


def _documents(stats):
    from trident.curate.read.shards import read_shard

    return [(doc.id, doc.text) for shard in stats["output"]["shards"] for doc in read_shard(shard)]


# two work partitions a stage, not 16: each still crosses between the workers through s3, in 380 requests, not 860
PARTITIONS = [f"stages.{stage}.partitions=2" for stage in ("site_lines", "fuzzy_dedup", "exact_dedup")]


@pytest.mark.timeout(240)
def test_ray_curates_a_warc_from_s3_to_s3_without_a_shared_disk(s3, tmp_path, ray_cluster):
    """Every intermediate file (phase shards, dedup partitions, drop lists) lives under the s3 OUT, so
    Ray workers on machines without a shared disk exchange them there; the result equals a local
    single-process run of the same pipeline, counter for counter and document for document."""
    import ray  # a dev dependency: this test fails, not skips, without it

    from trident.curate.run.pipeline import run_pipeline
    from trident.curate.samples.crawl import write_sample_warc

    write_sample_warc(tmp_path / "a.warc.gz", n_docs=16, seed=0)
    s3.fs.put_file(str(tmp_path / "a.warc.gz"), s3.url("crawl/a.warc.gz"))
    here = run_pipeline("curate-cc", [tmp_path / "a.warc.gz"], tmp_path / "here", workers=1, overrides=PARTITIONS)
    out = s3.url("curated")
    stats = run_pipeline("curate-cc", [s3.url("crawl")], out, executor="ray", workers=2, overrides=PARTITIONS)
    assert stats["executor"] == "ray" and stats["workers"] == 2 and stats["accounting"]["ok"]
    assert ray.is_initialized()  # it joined the session's cluster and left it up (ray_cluster: a starter stops it)
    assert stats["inputs"][0]["path"] == s3.url("crawl/a.warc.gz")
    assert [s["counters"] for s in stats["stages"]] == [s["counters"] for s in here["stages"]]
    assert _documents(stats) == _documents(here)
    written = {p.rsplit("/", 1)[1] for p in s3.fs.ls(out)}
    assert {"stats.json", "report.md", "funnel.png"} <= written and "work" not in written


@pytest.mark.timeout(180)
def test_eval_reads_checkpoint_and_tasks_from_s3_and_writes_results_there(s3, trained_checkpoint):
    from eval_fixtures import FIXTURES
    from trident.evaluate.harness import run_evaluation
    from trident.evaluate.lm import load_trident

    root, _, _ = trained_checkpoint
    step = complete_checkpoints(root)[-1]
    s3.fs.put(str(step), s3.url("ckpt/") + step.name, recursive=True)
    s3.fs.put(str(FIXTURES / "piqa"), s3.url("tasks/piqa"), recursive=True)
    s3.fs.put(str(FIXTURES / "lambada"), s3.url("tasks/lambada"), recursive=True)
    out = s3.url("eval-out")
    remote = run_evaluation(load_trident(s3.url("ckpt")), ["piqa", "lambada"], [0, 1], s3.url("tasks"), out,
                            seed=7, limit=3, log_samples=True, progress=False)
    local = run_evaluation(load_trident(str(root)), ["piqa", "lambada"], [0, 1], FIXTURES, None, seed=7, limit=3,
                           progress=False)
    scores = lambda results: {task: {k: v["metrics"] for k, v in shots.items()} for task, shots in results.items()}
    assert scores(remote["results"]) == scores(local["results"]) and len(remote["results"]) == 2
    assert remote["results"]["piqa"]["0"]["data"] == s3.url("tasks/piqa")
    assert scores(json.loads((location(out) / "results.json").read_text())["results"]) == scores(local["results"])
    assert s3.fs.glob(f"{out}/samples/*")
