"""TRIDENT_INJECT: parsed and checked once at start (a malformed value is exit 2), inert when unset,
each kind does what it says to the rank it names."""
import pytest
import torch

from trident.cli import main
from trident.parallel.inject import Fault, InjectError, Injector, flip_bit, parse


def test_parses_one_or_several_faults():
    assert parse("") == []
    assert parse("rank=2,step=3,kind=sigterm") == [Fault(rank=2, step=3, kind="sigterm")]
    slow, crash, flip = parse("rank=0,step=1,kind=slow:0.3; rank=1,step=5,kind=exit:7,attempt=any;"
                              "rank=3,step=2,kind=bitflip,param=head.weight")
    assert (slow.kind, slow.value) == ("slow", 0.3)
    assert (crash.kind, crash.value, crash.attempt) == ("exit", 7, None)
    assert (flip.kind, flip.param) == ("bitflip", "head.weight")


@pytest.mark.parametrize("text,named", [
    ("rank=1,step=3", "missing kind"), ("rank=x,step=3,kind=hang", "rank must be an integer"),
    ("rank=1,step=3,kind=melt", "kind must be one of"), ("rank=1,step=3,kind=slow", "slow needs seconds"),
    ("rank=1,step=3,kind=hang:2", "takes no argument"), ("rank=1,when=3,kind=hang", "keys rank, step"),
])
def test_malformed_values_are_refused_naming_the_part(text, named):
    with pytest.raises(InjectError, match=named):
        parse(text)


def test_a_malformed_value_stops_trident_train_with_exit_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("TRIDENT_INJECT", "rank=1,step=three,kind=exit")
    assert main(["train", "tiny", "--out", str(tmp_path / "run")]) == 2
    assert "TRIDENT_INJECT" in capsys.readouterr().err and not (tmp_path / "run").exists()


def test_faults_belong_to_their_rank_and_attempt():
    faults = parse("rank=1,step=2,kind=exit;rank=0,step=2,kind=kill,attempt=1")
    assert not Injector(faults, rank=0, attempt=0) and not Injector(faults, rank=2, attempt=0)
    assert Injector(faults, rank=1, attempt=0) and not Injector(faults, rank=1, attempt=1)
    assert Injector(faults, rank=0, attempt=1).faults[0].kind == "kill"
    Injector(faults, rank=1, attempt=0).before_step(1)  # not its step: nothing happens


def test_a_fault_strikes_once(monkeypatch):
    sent = []
    monkeypatch.setattr("os.kill", lambda pid, sig: sent.append(sig))
    injector = Injector(parse("rank=0,step=2,kind=sigusr2,at=send"), rank=0)
    for step in (1, 2, 2, 2, 3):  # before each send of steps 1-3: only step 2's first send signals
        injector.before_send(step)
    injector.before_step(2)  # not its point
    assert len(sent) == 1


def test_bitflip_changes_one_bit_of_the_named_parameter():
    first, second = torch.ones(4), torch.ones(3, dtype=torch.bfloat16)
    params = [("a", first), ("b", second)]
    injector = Injector(parse("rank=0,step=2,kind=bitflip,param=b"), rank=0)
    assert injector.after_update(1, params) is None and torch.equal(second, torch.ones(3, dtype=torch.bfloat16))
    assert injector.after_update(2, params) == "b"
    assert torch.equal(first, torch.ones(4)) and (second != 1).tolist() == [True, False, False]
    flip_bit(first)
    assert torch.isfinite(first).all() and first[0] != 1 and (first[1:] == 1).all()
