"""Extraction stages: HTML to text (html.Extract, `extract`), lists and tables put back
(lists.rescue), ftfy repair (clean.Clean, `clean`), language id (langid.LangId, `langid`).
"""
