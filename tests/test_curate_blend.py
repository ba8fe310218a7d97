"""Blending plan: weights <-> epochs per source, MT-NLG's table, token counts from .idx files."""
import json

import pytest
import yaml

from trident.cli import main
from trident.config import PRESET_DIR
from trident.data.blend_plan import BlendPlanError, data_section, load_sources, plan_blend


def test_mtnlg_table_gives_the_papers_epochs():
    sources, train_tokens = load_sources(PRESET_DIR / "blend-mtnlg.yaml")
    rows = {r["name"]: r for r in plan_blend(sources, train_tokens)}
    assert len(rows) == 15 and abs(sum(r["weight"] for r in rows.values()) - 1.0) < 1e-12
    assert rows["OpenWebText2"]["epochs"] == pytest.approx(3.5, abs=0.05)
    assert rows["Pile-CC"]["epochs"] == pytest.approx(0.5, abs=0.02)
    assert rows["Books3"]["epochs"] == pytest.approx(1.5, abs=0.02)


def test_epochs_become_weights_and_tokens_come_from_idx(tmp_path):
    from trident.data.indexed import IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(tmp_path / "small_text_document")
    for n in (300, 500, 200):
        builder.add_document(list(range(n)))
    builder.finalize()
    sources = [{"name": "big", "prefix": "big", "tokens": 9000, "epochs": 1.0},
               {"name": "small", "prefix": str(tmp_path / "small_text_document"), "epochs": 1.0}]
    rows = plan_blend(sources, train_tokens=10_000)
    assert rows[1]["tokens"] == 1000
    assert [r["weight"] for r in rows] == pytest.approx([0.9, 0.1])
    assert [r["epochs"] for r in rows] == pytest.approx([1.0, 1.0])
    assert data_section(rows) == {"data": {"paths": [[0.9, "big"], [0.1, str(tmp_path / "small_text_document")]]}}


def test_bad_sources_name_the_source(tmp_path):
    with pytest.raises(BlendPlanError, match="'a': give exactly one of 'weight' or 'epochs'"):
        plan_blend([{"name": "a", "prefix": "p", "tokens": 5, "weight": 1, "epochs": 2}], 10)
    with pytest.raises(BlendPlanError, match="'b': no 'tokens' given"):
        plan_blend([{"name": "b", "prefix": str(tmp_path / "missing"), "weight": 1}], 10)


def test_blend_command_writes_the_data_section(tmp_path, capsys):
    out = tmp_path / "data.yaml"
    assert main(["curate", "blend", "--sources", str(PRESET_DIR / "blend-mtnlg.yaml"), "--out", str(out),
                 "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    section = yaml.safe_load(out.read_text())
    assert section == {"data": printed["data"]} and len(section["data"]["paths"]) == 15
    assert section["data"]["paths"][1] == [0.1928, "data/owt2_text_document"]
    assert main(["curate", "blend"]) == 1
