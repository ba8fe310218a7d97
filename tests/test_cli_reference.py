"""docs/cli.md is every command's current --help: a changed option shows here until the page is
regenerated with `python -c "from trident.cli import reference_page; print(reference_page(), end='')" > docs/cli.md`."""
from pathlib import Path

from trident.cli import COMMANDS, reference_page

PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_the_command_line_reference_is_current():
    page = reference_page()
    assert all(f"## trident {name}\n" in page for name in COMMANDS)
    assert "--output-prefix" in page and "--tasks" in page and "--nproc" in page  # options, not only usage lines
    assert PAGE.read_text() == page, "docs/cli.md is out of date: regenerate it (see this test's docstring)"
