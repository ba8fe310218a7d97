"""The model's files (its tokenizer) travel from checkpoint to checkpoint after a resume, also once
keep_last has pruned the checkpoint the run started from (its fourth save after resuming failed:
FileNotFoundError on the pruned folder's tokenizer.json, a restart in every elastic or requeued run)."""
from train_fixtures import make_trainer, tiny_config


def test_saves_after_the_start_checkpoint_is_pruned_keep_the_tokenizer(tmp_path):
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text('{"model": "stand-in: copied byte for byte, never parsed here"}')
    keep = ["checkpoint.save_interval=1", "checkpoint.keep_last=1", f"checkpoint.dir={tmp_path / 'ckpt'}"]
    first = make_trainer(tiny_config("train.steps=1", *keep), tmp_path / "first")
    first.tokenizer_file = tokenizer
    first.train()
    resumed = make_trainer(tiny_config("train.steps=4", *keep, "checkpoint.load=auto"), tmp_path / "resumed")
    assert resumed.step == 1 and "tokenizer.json" in resumed.model_files
    resumed.train()  # saves 2, 3, 4: step 1, where it started, is pruned by the save of step 2
    saved = sorted(p.name for p in (tmp_path / "ckpt").glob("step_*"))
    assert saved == ["step_0000004"]
    assert (tmp_path / "ckpt" / "step_0000004" / "tokenizer.json").read_bytes() == tokenizer.read_bytes()
