"""The helpers the flow tests share: a flow's train/eval stages run in this process, trident's exit
status with what it printed, a tiny training override list, a small curation pipeline and a site of
small HTML pages."""
from __future__ import annotations

import contextlib
import html
import io
import signal
from pathlib import Path

from trident.cli import main
from trident.curate.samples.crawl import reference_articles

TINY = ["model.seq_length=64", "model.num_layers=1", "train.steps=2", "train.peak_tflops=1"]
PIPELINE = {"stages": [{"stage": "extract"}, {"stage": "clean"}, {"stage": "exact_dedup", "scope": "global"}]}


@contextlib.contextmanager
def stages_in_process(monkeypatch):
    """The flow's `trident train` and `trident eval` stages run through trident.cli.main in this process
    instead of a fresh interpreter each (~3 s of CPU for `import torch` apiece): these tests are about
    which stages run; test_demo.py runs them as child processes, as a user's flow does."""
    from trident.flow import stages
    from trident.flow.spec import FlowError
    from trident.train.preemption import STOP_SIGNALS

    def in_process(args: list[str]) -> None:
        if main(args):
            raise FlowError(f"`trident {args[0]}` failed")

    handlers = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}  # `trident train` catches stop signals
    monkeypatch.setattr(stages, "_trident", in_process)
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def run_main(args: list[str]) -> dict:
    """trident's exit status and what it printed (to streams that are not terminals, as in a log)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return {"code": code, "out": out.getvalue(), "err": err.getvalue()}


def write_page(path: Path, title: str, text: str) -> None:
    """An HTML page: the text's paragraphs as an article between a navigation bar and a footer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    article = "".join(f"<p>{html.escape(p)}</p>" for p in text.split("\n") if p.strip())
    path.write_text(f"<html><head><title>{title}</title></head><body><nav>Home | Library</nav>"
                    f"<article>{article}</article><footer>Copyright</footer></body></html>")


def write_site(root: Path, pages: int = 24) -> list[str]:
    """`pages` small HTML pages under ROOT/site/; returns their articles' texts."""
    texts = reference_articles()[:pages]
    for i, text in enumerate(texts):
        write_page(root / "site" / f"page{i:02d}.html", f"Page {i}", text)
    return texts
