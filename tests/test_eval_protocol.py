"""`trident eval --protocol mtnlg`: the paper's tasks at zero, one and its few-shot k, printed in the
paper's layout beside the published numbers, which must be those of docs/reference.md."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from eval_fixtures import FIXTURES, save_trident_checkpoint, tiny_tokenizer
from trident.cli import main
from trident.evaluate.protocols import PROTOCOLS, protocol_cells

REFERENCE = Path(__file__).parents[1] / "docs" / "reference.md"
# few-shot files of each protocol task, grown by repetition so the paper's k (up to 50) can be drawn
TRAIN_FILES = ["BoolQ/train.jsonl", "WiC/train.jsonl", "piqa/train.jsonl", "piqa/train-labels.lst",
               "hellaswag/hellaswag_train.jsonl", "winogrande/train_xl.jsonl", "anli/R2/train.jsonl",
               "lambada/lambada_test.jsonl"]


def protocol_data(root: Path) -> Path:
    """The fixture files with every few-shot pool holding at least 51 examples (RACE: 12 articles)."""
    data = root / "data"
    shutil.copytree(FIXTURES, data)
    for name in TRAIN_FILES:
        lines = (data / name).read_text().splitlines()
        (data / name).write_text("\n".join(lines * (51 // len(lines) + 1)) + "\n")
    for article in list((data / "race" / "train" / "high").iterdir()):
        for copy in range(6):
            shutil.copy(article, article.with_name(f"{article.stem}_{copy}.txt"))
    return data


@pytest.mark.timeout(10)
def test_protocol_numbers_are_those_of_docs_reference():
    text = REFERENCE.read_text()
    table = text[text.index("| task | zero-shot | one-shot | few-shot | few-shot k (?) |"):]
    documented = {}
    for line in table.splitlines()[2:]:  # below the header and its |---| line
        if not line.startswith("| "):
            break
        label, zero, one, few, k = [cell.strip() for cell in line.strip("|").split("|")]
        documented[re.sub(r" \(\?\)$", "", label)] = ((float(zero), float(one), float(few)), int(k))
    assert documented == {row.label: (row.published, row.k) for row in PROTOCOLS["mtnlg"]}
    assert protocol_cells("mtnlg")["piqa"] == [0, 1, 50]


@pytest.mark.timeout(10)
def test_tasks_or_shots_beside_a_protocol_are_refused(capsys):
    assert main(["eval", "ckpt", "--protocol", "mtnlg", "--tasks", "piqa"]) == 2
    assert "drop --tasks" in capsys.readouterr().err
    assert main(["eval", "ckpt", "--protocol", "mtnlg", "--tasks", "piqa", "--shots", "0"]) == 2
    assert "drop --tasks and --shots" in capsys.readouterr().err
    assert main(["eval", "ckpt"]) == 2
    assert "give --tasks" in capsys.readouterr().err


@pytest.mark.timeout(60)
def test_protocol_run_prints_the_papers_table_and_records_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # one table line per row
    tokenizer = tiny_tokenizer(tmp_path)
    ckpt, _ = save_trident_checkpoint(tokenizer, tmp_path)
    out = tmp_path / "eval"
    code = main(["eval", str(ckpt), "--protocol", "mtnlg", "--data-dir", str(protocol_data(tmp_path)),
                 "--limit", "2", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    header = next(line for line in printed.splitlines() if "zero-shot" in line)
    assert [c.strip() for c in header.strip("┃│ ").replace("┃", "│").split("│")] == [
        "Task", "Metric", "n", "zero-shot", "530B", "one-shot", "530B", "k", "few-shot", "530B"]
    assert re.search(r"RACE-h\s*│\s*acc\s*│\s*2\s*│.*│\s*47\.9\s*│.*│\s*48\.4\s*│\s*10\s*│.*│\s*47\.9", printed)
    results = json.loads((out / "results.json").read_text())
    assert results["partial"] is False and results["protocol"]["fewshot_k"]["hellaswag"] == 20
    for row, paper in zip(results["protocol"]["rows"], PROTOCOLS["mtnlg"]):
        per_shot = results["results"][row["task"]]
        assert set(per_shot) == {"0", "1", str(paper.k)} and row["few"]["k"] == paper.k
        assert per_shot[str(paper.k)]["fewshot"]["k"] == paper.k
        for setting, k, published in zip(("zero", "one", "few"), (0, 1, paper.k), paper.published):
            ours = per_shot[str(k)]["metrics"][row["metric"]]
            assert row[setting] == {"k": k, "trident_pct": round(100 * ours, 2), "paper_pct": published}
    assert results["protocol"]["rows"][2]["metric"] == "acc_norm"  # HellaSwag's primary metric
