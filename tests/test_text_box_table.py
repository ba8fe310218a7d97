"""The closing summary's table (trident.text.box_table): rich's look without importing rich."""
from trident.text.box_table import box_table


def test_columns_fit_their_widest_cell_and_align_as_asked():
    text = box_table("curation -> out", ["stage", "in", "dropped"], [["read", "20", ""], ["fuzzy_dedup", "7", "dup 13"]],
                     right=("in",))
    assert text.split("\n") == [
        "       curation -> out",
        "┏━━━━━━━━━━━━━┳━━━━┳━━━━━━━━━┓",
        "┃ stage       ┃ in ┃ dropped ┃",
        "┡━━━━━━━━━━━━━╇━━━━╇━━━━━━━━━┩",
        "│ read        │ 20 │         │",
        "│ fuzzy_dedup │  7 │ dup 13  │",
        "└─────────────┴────┴─────────┘",
    ]


def test_an_output_without_box_characters_gets_ascii():
    for encoding in ("cp1252", "ascii", None, "no-such-codec"):
        lines = box_table("t", ["a", "n"], [["x", "1"]], right=("n",), encoding=encoding).split("\n")
        assert lines[1:] == ["+===+===+", "| a | n |", "+===+===+", "| x | 1 |", "+---+---+"]
        assert "\n".join(lines).encode("ascii")
