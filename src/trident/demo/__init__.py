"""`trident demo`: the packaged flow file demo.flow.yaml (inputs the flow generates itself: the
standard library's docstrings and a synthetic Common Crawl WARC), run by the flow engine (trident.flow)."""
