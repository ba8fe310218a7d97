"""Merging the ranks' flight-recorder dumps (OUT/debug/flight/rank_R.json, parallel/flight.py) into
one verdict: which rank stopped first, the instruction it was stuck in, and who was waiting for it.

A rank's latest open event (begun, never ended) or failed one (a wait that timed out) is where it stands. It is *waiting* when that event
is a wait on a transfer or a collective (it names a peer or a group); otherwise it is stuck on its own
(in a compute, before posting a send, between instructions). The first rank to stop is the rank stuck
on its own since the earliest time; when every dumped rank is waiting, it is a rank that wrote no dump
(dead, or hung where its watchdog could not write) that the others wait for; failing that, the rank
whose last progress is oldest.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

STALE_S = 600.0  # a dump this much older than the newest belongs to an earlier incident


@dataclass
class RankState:
    rank: int
    dump: dict
    open: dict | None  # innermost open event
    waiting_on: list[int] = field(default_factory=list)  # ranks it waits for (peer, or its group's others)

    @property
    def waiting(self) -> bool:
        return bool(self.open) and bool(self.open.get("group")) and not self.open["op"].startswith("post ")

    @property
    def since(self) -> float:
        return self.open["started"] if self.open else self.dump.get("last_progress", 0.0)


def load_dumps(folder: Path) -> tuple[dict[int, dict], list[str]]:
    """rank -> dump, and the problems met (unreadable files, stale dumps), each naming its file."""
    dumps, problems = {}, []
    for path in sorted(folder.glob("rank_*.json")):
        try:
            dump = json.loads(path.read_text())
            dumps[int(dump["rank"])] = dump
        except (OSError, ValueError, KeyError, TypeError) as error:
            problems.append(f"{path}: unreadable dump ({error})")
    if dumps:
        newest = max(d.get("time", 0.0) for d in dumps.values())
        for rank in [r for r, d in dumps.items() if newest - d.get("time", 0.0) > STALE_S]:
            problems.append(f"{folder / f'rank_{rank}.json'}: from an earlier incident ({newest - dumps[rank]['time']:.0f} s "
                            f"before the newest dump), ignored")
            del dumps[rank]
    return dumps, problems


def _group_ranks(group: str) -> list[int]:
    found = re.search(r"ranks \[([\d, ]*)\]", group or "")
    return [int(r) for r in found.group(1).split(",") if r.strip()] if found else []


def rank_state(rank: int, dump: dict) -> RankState:
    """Where a rank stands: its latest event that is still open or that failed (a collective that
    raised, typically on a timeout: the wait it was in)."""
    standing = [e for e in dump.get("events", []) if e.get("ended") is None or e.get("failed")]
    event = max(standing, key=lambda e: e["seq"]) if standing else None
    state = RankState(rank, dump, event)
    if state.waiting:
        members = _group_ranks(event["group"]) or list(range(int(dump.get("world_size", 1))))  # default group: all
        state.waiting_on = [event["peer"]] if event.get("peer") is not None else [r for r in members if r != rank]
    return state


def describe_event(event: dict | None) -> str:
    if event is None:
        return "no open instruction (idle between steps)"
    parts = [f"`{event['op']}`"]
    if event.get("microbatch") is not None:
        parts.append(f"micro-batch {event['microbatch']} chunk {event['chunk']}")
    if event.get("peer") is not None:
        parts.append(f"{'to' if 'send' in event['op'] else 'from'} rank {event['peer']}")
    elif event.get("group"):
        parts.append(f"in the {event['group']}")
    return " ".join(parts) + f" (step {event['step']})"


def diagnose(folder: Path) -> dict:
    """The verdict as plain data (what `trident diagnose --json` prints)."""
    dumps, problems = load_dumps(folder)
    if not dumps:
        raise FileNotFoundError(f"{folder}: no flight-recorder dumps (rank_R.json); they are written when a "
                                f"step fails, a rank stalls for parallel.timeout_s, or on SIGUSR2")
    world = max(int(d.get("world_size", 1)) for d in dumps.values())
    states = {rank: rank_state(rank, dump) for rank, dump in dumps.items()}
    missing = [r for r in range(world) if r not in dumps]
    first, why = _first_to_stop(states, missing)
    waiters = [s for s in states.values() if first in s.waiting_on]
    return {
        "folder": str(folder), "world_size": world, "dumped": sorted(dumps), "missing": missing, "problems": problems,
        "first": {"rank": first, "why": why, "dumped": first in states,
                  "event": states[first].open if first in states else None,
                  "coordinates": _coordinates(dumps.get(first)), "host": (dumps.get(first) or {}).get("host")},
        "waiting_on_first": [{"rank": s.rank, "event": s.open} for s in sorted(waiters, key=lambda s: s.rank)],
        "torch": torch_groups(folder, sorted(dumps)),
        "ranks": [{"rank": s.rank, "reason": s.dump.get("reason"), "step": s.dump.get("step"), "since": s.since,
                   "waiting": s.waiting, "waiting_on": s.waiting_on, "event": s.open} for s in states.values()],
    }


def torch_groups(folder: Path, ranks: list[int]) -> list[dict]:
    """torch's flight recorder traces (torch_rank_R.json, NCCL or gloo), folded by process group: how far
    each member got in the group's collective sequence; the members behind the others are named."""
    reached: dict[str, dict[int, int]] = {}
    for rank in ranks:
        path = folder / f"torch_rank_{rank}.json"
        try:
            entries = json.loads(path.read_text()).get("entries", []) if path.exists() else []
        except (OSError, ValueError):
            continue
        for entry in entries:
            if entry.get("is_p2p"):
                continue
            desc = entry["process_group"][1]
            seen = reached.setdefault(desc, {})
            seen[rank] = max(seen.get(rank, 0), int(entry.get("collective_seq_id", 0)))
    folded = []
    for desc, positions in sorted(reached.items()):
        if len(set(positions.values())) > 1:
            lowest = min(positions.values())
            folded.append({"group": desc, "reached": positions,
                           "behind": sorted(r for r, seq in positions.items() if seq == lowest)})
    return folded


def _first_to_stop(states: dict[int, RankState], missing: list[int]) -> tuple[int, str]:
    stuck = [s for s in states.values() if s.open is not None and not s.waiting]
    if stuck:
        return min(stuck, key=lambda s: s.since).rank, "stuck on its own (not waiting for any other rank)"
    awaited = {r for s in states.values() for r in s.waiting_on if r in missing}
    if awaited:
        return min(awaited), "wrote no dump (died, or hung where its watchdog could not write) and others wait for it"
    oldest = min(states.values(), key=lambda s: s.since)
    return oldest.rank, "every rank waits; this one made no progress for the longest"


def _coordinates(dump: dict | None) -> str:
    if not dump:
        return ""
    cp = f" cp {dump.get('cp_rank')}" if dump.get("cp", 1) > 1 else ""  # context parallelism's ring
    return f"dp {dump.get('dp_rank')} pp {dump.get('pp_rank')}{cp} tp {dump.get('tp_rank')}"


def format_report(verdict: dict) -> str:
    first = verdict["first"]
    where = f" ({first['coordinates']}, host {first['host']})" if first["dumped"] else ""
    lines = [f"flight dumps: {len(verdict['dumped'])} of {verdict['world_size']} ranks in {verdict['folder']}"
             + (f"; none from ranks {verdict['missing']}" if verdict["missing"] else ""),
             f"first rank to stop: rank {first['rank']}{where}: {first['why']}"]
    if first["event"] is not None:
        lines.append(f"  stuck in {describe_event(first['event'])}")
    for waiter in verdict["waiting_on_first"]:
        lines.append(f"  rank {waiter['rank']} waits for it in {describe_event(waiter['event'])}")
    others = [r for r in verdict["ranks"] if r["rank"] != first["rank"] and
              r["rank"] not in {w["rank"] for w in verdict["waiting_on_first"]}]
    for state in sorted(others, key=lambda r: r["rank"]):
        lines.append(f"  rank {state['rank']}: {describe_event(state['event'])}")
    for group in verdict["torch"]:
        reached = ", ".join(f"rank {r} #{seq}" for r, seq in sorted(group["reached"].items()))
        lines.append(f"torch flight recorder, {group['group']}: collectives reached {reached}; "
                     f"behind: {', '.join(f'rank {r}' for r in group['behind'])}")
    lines += [f"note: {problem}" for problem in verdict["problems"]]
    return "\n".join(lines)
