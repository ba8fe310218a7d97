"""Every path argument of every command works end to end on an fsspec URL, or exits 2 naming the path
and what is unsupported; a URL never becomes a local folder named after its scheme (`s3:/bucket/run`).

One table: each command runs in this process (trident.cli.main) from an empty working directory,
which must stay empty, with its outputs on a store: moto's S3 for training (a resume must find its
checkpoints there), memory:// for the rest (one per process, as these runs are)."""
import json
import os
import signal
import threading
import time
import urllib.request

import fsspec
import pytest

from eval_fixtures import FIXTURES
from train_fixtures import tiny_corpus
from trident.cli import main
from trident.train.launch import free_port

TRAIN = ["tiny", "data.paths=[{corpus}/data]", "data.tokenizer={corpus}/tok.json", "model.num_layers=1",
         "train.global_batch_size=2", "train.decay_tokens=100000", "logging.log_interval=1", "train.peak_tflops=1"]
REFUSED = "an fsspec URL is not supported here"

# (what, argv, exit code, objects that must then be on the store, or words the error must hold[, a check of
# the output: check(stdout, where) -> what is wrong, or "" (it may add keys to `where` for later rows)])
ROWS = [
    ("train --out s3", ["train", *TRAIN, "train.steps=2", "--out", "{run}"], 0,
     ["{run}/metrics.jsonl", "{run}/config.yaml", "{run}/checkpoints/step_0000002/COMPLETE"]),
    ("train resumes from s3", ["train", *TRAIN, "train.steps=3", "checkpoint.load=auto", "--out", "{run}"], 0,
     ["{run}/checkpoints/step_0000003/COMPLETE"]),
    ("checkpoint.dir and .load", ["train", *TRAIN, "train.steps=3", "checkpoint.dir={m}/ckpt",
                                  "checkpoint.load={run}/checkpoints/step_0000002", "--out", "{m}/run2"], 0,
     ["{m}/ckpt/step_0000003/COMPLETE", "{m}/run2/metrics.jsonl"]),
    ("eval", ["eval", "{run}/checkpoints", "--tasks", "lambada", "--data-dir", "{m}/tasks", "--limit", "2",
              "--log-samples", "--out", "{m}/eval"], 0, ["{m}/eval/results.json", "{m}/eval/samples/lambada_0shot.jsonl"]),
    ("eval --tokenizer --contamination-corpus",
     ["eval", "{run}/checkpoints", "--tasks", "lambada", "--data-dir", "{m}/tasks", "--limit", "2", "--tokenizer",
      "{m}/in/tok.json", "--out", "{m}/eval2", "--contamination-ngram", "8", "--contamination-corpus",
      "{m}/tasks/lambada/lambada_test.jsonl"], 0, ["{m}/eval2/results.json"], lambda out, w: _contaminated(w)),
    ("eval --bias (crows_pairs on the store)",
     ["eval", "{run}/checkpoints", "--tasks", "lambada", "--data-dir", "{m}/tasks", "--limit", "1", "--bias",
      "--bias-samples", "1", "--bias-length", "2", "--out", "{m}/eval3"], 0, ["{m}/eval3/results.json"],
     lambda out, w: "" if _results(w, "eval3")["bias"]["crows_pairs"]["n"] > 0 else "no crows_pairs scored"),
    ("generate", ["generate", "{run}/checkpoints", "--prompt", "alpha", "--max-new-tokens", "2", "--greedy", "--json"],
     0, [], lambda out, w: _completion(out, w, "greedy")),
    ("generate --tokenizer", ["generate", "{run}/checkpoints", "--tokenizer", "{m}/in/tok.json", "--prompt", "alpha",
                              "--max-new-tokens", "2", "--greedy", "--json"], 0, [],
     lambda out, w: _completion(out, w, "same")),
    ("serve --tokenizer", ["serve", "{run}/checkpoints", "--tokenizer", "{m}/in/tok.json", "--max-batch", "1",
                           "--port", "{port}"], 0, [],
     lambda out, w: "" if w["served"] == w["greedy"] else f"served {w['served']!r}, generate {w['greedy']!r}"),
    ("replay", ["replay", "{run}", "--step", "3", "--json"], 0, [], lambda out, w: _replayed(out, w)),
    ("data which", ["data", "which", "{run}", "--step", "2", "--json"], 0, [], lambda out, w: _step_documents(out, w)),
    ("data which --doc", ["data", "which", "{run}", "--doc", "{doc}", "--json"], 0, [],
     lambda out, w: "" if 2 in [s["step"] for s in json.loads(out)["steps"]] else f"step 2 not among {out}"),
    ("data remove --run", ["data", "remove", "--prefix", "{corpus}/data", "--ids", "{m}/in/read-ids.txt", "--out",
                           "{m}/d3", "--run", "{run}", "--json"], 0, ["{m}/d3.bin", "{m}/d3.removal.json"],
     lambda out, w: "" if 2 in json.loads(out)["run_steps"][w["doc_index"]] else f"step 2 not in {out[-300:]}"),
    ("diagnose", ["diagnose", "{run}"], 1, ["{run}/debug/flight: no flight-recorder dumps"]),
    ("export-hf", ["export-hf", "{run}/checkpoints", "{m}/hf"], 0,
     ["{m}/hf/config.json", "{m}/hf/model.safetensors", "{m}/hf/merges.txt"]),
    ("import-hf", ["import-hf", "{m}/hf", "{m}/imported"], 0, ["{m}/imported/step_0000000/COMPLETE"]),
    ("tokenizer train", ["tokenizer", "train", "--input", "{m}/in/c.jsonl", "--vocab-size", "300", "--out",
                         "{m}/tok", "--gpt2-files"], 0, ["{m}/tok/tokenizer.json", "{m}/tok/vocab.json"]),
    ("tokenize", ["tokenize", "--input", "{m}/in/c.jsonl", "--tokenizer", "{m}/tok", "--output-prefix", "{m}/d",
                  "--workers", "1"], 0, ["{m}/d.bin", "{m}/d.idx", "{m}/d.stats.json"]),
    ("data remove", ["data", "remove", "--prefix", "{m}/d", "--ids", "{m}/in/ids.txt", "--out", "{m}/d2"], 0,
     ["{m}/d2.bin", "{m}/d2.idx", "{m}/d2.removal.json"]),
    ("curate", ["curate", "{local}/pipeline.yaml", "--input", "{m}/in/c.jsonl", "--out", "{m}/curated"], 0,
     ["{m}/curated/stats.json", "{m}/curated/report.md"]),
    ("curate why", ["curate", "why", "{m}/curated", "doc-1"], 0, []),
    ("curate train-quality", ["curate", "train-quality", "--positive", "{m}/in/c.jsonl", "--negative",
                              "{m}/in/other.jsonl", "--n-features", "256", "--out", "{m}/quality.safetensors"], 0, ["{m}/quality.safetensors"]),
    ("curate blend", ["curate", "blend", "--sources", "blend-mtnlg", "--out", "{m}/blend.yaml"], 0, ["{m}/blend.yaml"]),
    ("pipeline-diagram", ["pipeline-diagram", "--out", "{m}/pp.png", "--save-timeline", "{m}/pp.json"], 0,
     ["{m}/pp.png", "{m}/pp.json"]),
    # where a URL cannot be served: exit 2, the argument, the path and why
    ("collapsed URL", ["train", *TRAIN, "--out", "s3:/bucket/run"], 2, ["s3:/bucket/run", "collapsed"]),
    ("tensorboard", ["train", *TRAIN, "logging.tensorboard=true", "--out", "{m}/tb"], 2,
     ["--out {m}/tb", REFUSED, "logging.tensorboard"]),
    ("data.cache_dir", ["train", *TRAIN, "data.cache_dir={m}/cache", "--out", "{m}/y"], 2,
     ["data.cache_dir {m}/cache", REFUSED]),
    ("config URL", ["train", "{m}/run.yaml", "--out", "{m}/x"], 2, ["{m}/run.yaml", "a URL"]),
    ("eval --hf", ["eval", "--hf", "{m}/hf", "--tasks", "piqa"], 2, ["--hf {m}/hf", REFUSED]),
    ("launch", ["launch", "tiny", "--nodes", "1", "--gpus-per-node", "1", "--out", "{m}/slurm"], 2,
     ["--out {m}/slurm", REFUSED]),
    ("plan --hardware", ["plan", "tiny", "--gpus", "1", "--hardware", "{m}/hw.yaml"], 2, ["--hardware {m}/hw.yaml", REFUSED]),
    ("plan CONFIG", ["plan", "{m}/run.yaml", "--gpus", "1"], 2, ["{m}/run.yaml", "a URL"]),
    ("rehearse CONFIG", ["rehearse", "{m}/run.yaml", "--gpus", "1"], 2, ["{m}/run.yaml", "a URL"]),
    ("run FLOW", ["run", "{m}/flow.yaml"], 2, ["FLOW {m}/flow.yaml", REFUSED]),
    ("run --out", ["run", "{local}/flow.yaml", "--out", "{m}/flow"], 2, ["--out {m}/flow", REFUSED]),
    ("flow file paths", ["run", "{local}/url-flow.yaml", "--out", "{local}/flow"], 2,
     ["url-flow.yaml", "flow file path {m}/in/c.jsonl", REFUSED]),
    ("demo", ["demo", "--out", "{m}/demo", "--max-docs", "300", "--steps", "1"], 2, ["--out {m}/demo", REFUSED]),
]


def _results(where: dict, name: str) -> dict:
    with fsspec.open(f"{where['m']}/{name}/results.json", "rt") as handle:
        return json.load(handle)


def _contaminated(where: dict) -> str:
    """The --tokenizer URL scores as the checkpoint's own tokenizer; every example is dirty against its own file."""
    results, plain = _results(where, "eval2"), _results(where, "eval")
    metrics = lambda r: r["results"]["lambada"]["0"]["metrics"]
    if metrics(results) != metrics(plain):
        return f"scores with --tokenizer {metrics(results)} != {metrics(plain)}"
    report = results["results"]["lambada"]["0"]["contamination"]
    corpus = results["contamination"]["corpus"]
    return "" if report["dirty"] == 2 and corpus == [f"{where['m']}/tasks/lambada/lambada_test.jsonl"] else \
        f"contamination {report}, corpus {corpus}: want both examples dirty"


def _completion(out: str, where: dict, key: str) -> str:
    """generate --json: two new tokens; `greedy` records them, `same` compares with the recorded ones."""
    result = json.loads(out)
    if result["new_tokens"] != 2 or not result["completion"]:
        return f"not two new tokens: {result}"
    if key == "same":
        return "" if result["completion"] == where["greedy"] else f"{result['completion']!r} != {where['greedy']!r}"
    where[key] = result["completion"]
    return ""


def _replayed(out: str, where: dict) -> str:
    result = json.loads(out)
    start = f"{where['run']}/checkpoints/step_0000002"
    good = result["step"] == 3 and result["from_checkpoint"] == start and result["bit_exact"] and result["same_samples"]
    return "" if good else f"replay of step 3 from {start} not bit-exact: {out[-400:]}"


def _step_documents(out: str, where: dict) -> str:
    """data which --step 2: the samples the run logged for step 2, traced to documents; the first one becomes
    the document of the --doc and data remove --run rows."""
    from trident.train.metrics import read_metrics

    answer = json.loads(out)
    logged = next(r["samples"] for r in read_metrics(f"{where['run']}/metrics.jsonl") if r["step"] == 2)
    documents = answer["documents"]
    if answer["samples"] != logged or not documents or not all(":" in d["source"] for d in documents):
        return f"samples {answer['samples']} (logged {logged}), documents {documents}"
    where["doc"], where["doc_index"] = documents[0]["source"], str(documents[0]["document"])
    fsspec.filesystem("memory").pipe(f"{where['m']}/in/read-ids.txt", f"{where['doc_index']}\n".encode())
    return ""


def _serve(argv: list[str], where: dict) -> int:
    """`trident serve` here (it must own the main thread's signals): another thread asks for one greedy
    completion (where["served"]), then sends the SIGTERM that stops it. Its exit code, or -1 when it
    served nothing."""
    answer, done = [], threading.Event()

    def client():
        deadline = time.monotonic() + 60
        while not done.is_set() and time.monotonic() < deadline:
            try:
                body = {"prompt": "alpha", "max_tokens": 2, "temperature": 0}
                request = urllib.request.Request(f"http://127.0.0.1:{where['port']}/v1/completions", headers={
                    "Content-Type": "application/json"}, data=json.dumps(body).encode())
                with urllib.request.urlopen(request, timeout=30) as response:
                    answer.append(json.loads(response.read()))
                break
            except OSError:
                time.sleep(0.2)
        if not done.is_set():
            os.kill(os.getpid(), signal.SIGTERM)  # the server's handler: drain, then return

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    try:
        code = main(argv)
    finally:
        done.set()
        thread.join()
    if not answer or "choices" not in answer[0]:
        return -1  # it served nothing
    where["served"] = answer[0]["choices"][0]["text"]
    return code


def _inputs(tmp_path, m: str) -> dict:
    """A local corpus and pipeline outside the working directory; task data, JSONL and ids on the store."""
    (tmp_path / "corpus").mkdir()
    corpus = tiny_corpus(tmp_path / "corpus")
    memory = fsspec.filesystem("memory")
    memory.put(str(FIXTURES / "lambada"), f"{m}/tasks/lambada", recursive=True)
    lines = (corpus / "c.jsonl").read_text().splitlines()
    memory.pipe(f"{m}/in/c.jsonl", "".join(
        json.dumps({**json.loads(line), "id": f"doc-{i}"}) + "\n" for i, line in enumerate(lines)).encode())
    memory.pipe(f"{m}/in/other.jsonl", "".join(json.dumps({"text": f"buy now {i} click here"}) + "\n"
                                               for i in range(40)).encode())
    memory.pipe(f"{m}/in/ids.txt", b"0\n")
    memory.put(str(corpus / "tok.json"), f"{m}/in/tok.json")
    memory.put(str(FIXTURES / "crows_pairs"), f"{m}/tasks/crows_pairs", recursive=True)
    local = tmp_path / "local"
    local.mkdir()
    (local / "pipeline.yaml").write_text("stages:\n  - {stage: min_length, min_tokens: 5}\n  - {stage: exact_dedup}\n")
    (local / "flow.yaml").write_text("sources: [{name: a, paths: [x.jsonl]}]\n")
    (local / "url-flow.yaml").write_text(f"sources: [{{name: a, paths: ['{m}/in/c.jsonl']}}]\n")
    return {"corpus": corpus, "local": local, "m": m}


def _checked(check: list, out: str, where: dict) -> str:
    """What the row's output check finds wrong ("" when right or when the row has no check)."""
    try:
        return check[0](out, where) if check else ""
    except Exception as error:  # unreadable output is a wrong output
        return f"{type(error).__name__}: {error} in {out[-300:]!r}"


@pytest.mark.timeout(240)
def test_every_command_writes_urls_to_the_store_or_refuses_them(s3, tmp_path, monkeypatch, capsys):
    m = f"memory://{tmp_path.name}"
    where = _inputs(tmp_path, m) | {"run": s3.url(f"{tmp_path.name}/run"), "port": free_port()}
    monkeypatch.setenv("TRIDENT_CACHE", str(tmp_path / "cache"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    failures = []
    for what, argv, want, expected, *check in ROWS:
        try:
            argv = [arg.format(**where) for arg in argv]
            code = _serve(argv, where) if what.startswith("serve") else main(argv)
        except Exception as error:  # a crash (or a key an earlier row failed to set) fails this row only
            code = f"{type(error).__name__}: {error}"
        out, err = capsys.readouterr()
        expected = [text.format(**where) for text in expected]
        if want == 0:
            missing = [url for url in expected if not fsspec.open(url).fs.exists(url)]
        else:
            missing = [text for text in expected if text not in err]
        wrong = _checked(check, out, where) if code == want == 0 else ""
        left = sorted(p.name for p in cwd.iterdir())
        if code != want or missing or left or wrong:
            failures.append(f"{what}: exit {code} (want {want}), missing {missing}, left in cwd {left}, output "
                            f"{wrong or 'not checked'}: {err[-600:]}")
    fsspec.filesystem("memory").rm(m, recursive=True)
    assert not failures, "\n".join(failures)
    metrics = s3.fs.cat_file(f"{where['run']}/metrics.jsonl").decode().splitlines()  # its parts joined at the end
    assert [json.loads(line)["step"] for line in metrics] == [1, 2, 3]  # the resume appended to the first run's


def test_a_url_collapsed_by_a_local_path_is_refused_not_made_a_folder(tmp_path, monkeypatch):
    from trident.text.storage import UnsupportedLocation, location, make_folder, require_local

    monkeypatch.chdir(tmp_path)
    for text in ("s3:/bucket/run", "runs/gs:/bucket/x", f"{tmp_path}/memory:/a"):  # Path("s3://bucket/run") etc.
        with pytest.raises(UnsupportedLocation, match="collapsed"):
            make_folder(text)
    assert not list(tmp_path.iterdir())
    with pytest.raises(UnsupportedLocation, match=r"--out s3://bucket/run: an fsspec URL is not supported here \(why\)"):
        require_local("s3://bucket/run", "--out", "why")
    require_local(tmp_path / "x", "--out", "why")  # local paths pass, as does a colon that names no scheme
    assert make_folder("notascheme:/x").is_dir() and location("s3://bucket/run").path == "bucket/run"
