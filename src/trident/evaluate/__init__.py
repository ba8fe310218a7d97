"""Few-shot evaluation: the scoring engine, results, bias probes, contamination (tasks: trident.tasks).

Public entry points (see docs/evaluation.md):
- harness.run_evaluation(lm, tasks, shots, data_dir, out_dir, ...) -> results dict (+ OUT/results.json);
  preflight.py checks every task/shot cell first, resume.py keeps and reuses finished cells,
  protocols.py holds a paper's tasks, k and numbers (--protocol mtnlg), spread.py the few-shot spread
- lm.load_trident(ckpt) / lm.trident_lm(model, tokenizer, seq_length): a trident GPT as an LM
- lm.load_hf(dir) / lm.hf_lm(model, tokenizer): a transformers causal LM as an LM
- trident.tasks.get_task(name), trident.tasks.TASK_NAMES; heldout.write_heldout_tasks(texts, out_dir)
- bias.run_bias_probes(lm); contamination.find_dirty(examples, corpus)
"""
