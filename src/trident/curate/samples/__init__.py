"""Generated fixtures for the demo, tests and benchmarks: crawl.write_sample_warc (a sample crawl with
reference articles, copies, spam and other languages) and sites.site_corpus (templated sites with
the true template lines).
"""
