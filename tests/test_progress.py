"""Progress in a log: whole lines now and then, never a bar's carriage-return redraws."""
import io

from trident.text.progress import LineProgress, progress_bar


def test_a_log_gets_a_line_per_interval_and_one_at_the_end_without_carriage_returns(monkeypatch):
    clock = iter([0.0, 1.0, 31.0, 32.0, 70.0, 71.0])
    monkeypatch.setattr("trident.text.progress.time.monotonic", lambda: next(clock))
    stream = io.StringIO()
    bar = LineProgress(total=4, desc="extract", unit="task", stream=stream)  # starts at 0.0
    for _ in range(3):  # at 1.0 (no line), 31.0 (a line), 32.0 (none: within 30 s of it)
        bar.update()
    bar.close()  # 70.0: the last line
    bar.close()
    assert stream.getvalue() == "extract: 2/4 task (50%), 31.0 s\nextract: 3/4 task (75%), 70.0 s\n"


def test_iterating_passes_every_item_and_quiet_writes_nothing():
    stream = io.StringIO()
    assert list(LineProgress(range(3), desc="docs", stream=stream)) == [0, 1, 2]
    assert stream.getvalue().startswith("docs: 3 it, ") and "\r" not in stream.getvalue()
    quiet = io.StringIO()
    with LineProgress(total=2, stream=quiet, quiet=True) as bar:
        bar.update(2)
    assert quiet.getvalue() == ""


def test_a_bar_is_drawn_only_on_a_terminal(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert isinstance(progress_bar(total=3, desc="x"), LineProgress)
    monkeypatch.setattr("sys.stderr", Terminal())
    bar = progress_bar(total=3, desc="x", leave=False)
    assert not isinstance(bar, LineProgress)
    bar.close()
