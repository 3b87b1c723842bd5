"""How a run's steps were taken once any were stacked: the record its checkpoints and final.json keep.

A stacked step agrees with the solo step to float order, not bit for bit (docs/DESIGN.md contract 5), so a run
whose steps were taken by both is a third version of it and says so. The record is a list of segments, oldest
first, each to the checkpoint step it reached: {"to": step, "by": "solo"} or {"to": step, "by": "stacked",
"size": K, "members": [K run names]} (the ensemble it was first stacked in; which others train beside a member
changes none of its numbers). A run that only ever took the solo step keeps no record, so its checkpoint and
final.json are byte for byte what they always were; a run stacked from step 0 in one stretch keeps one segment
in its checkpoint, and final.json shows the record only where there is more than one.

A checkpoint written by 57's first fix holds `stacked` ({size, members, step}: stacked to that step, then
solo); it reads as the same record. One written before any record was kept (the ensemble loop before issue 57
wrote its members' checkpoints as solo ones) cannot be told from a solo run's: it reads as solo, so resumed in
an ensemble its record says "solo" for steps that loop stacked. Its weights and logs are not affected.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

Positive = Annotated[int, Field(ge=1)]


class Segment(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    to: Positive
    by: Literal["solo", "stacked"]
    size: Positive | None = None
    members: list[str] | None = None

    @model_validator(mode="after")
    def _ensemble(self) -> Segment:
        stacked = self.by == "stacked"
        if stacked != (self.size is not None) or stacked != (self.members is not None):
            raise ValueError("a stacked segment names its ensemble's size and members, a solo one neither")
        if stacked and len(self.members) != self.size:
            raise ValueError(f"names {len(self.members)} members of an ensemble of {self.size}")
        if stacked and len(set(self.members)) != len(self.members):
            raise ValueError("names a member twice")
        return self


class _Legacy(BaseModel):  # 57's first record: stacked to `step`, solo after it
    model_config = ConfigDict(strict=True, extra="forbid")
    size: Positive
    members: list[str]
    step: Positive


SEGMENTS = TypeAdapter(list[Segment])


def problems(state: dict[str, Any], name: str | None = None) -> list[str]:
    """What is wrong with a checkpoint's record (empty where it holds none or a sound one); name: the run's, as
    the record names members (<variant>/<seed>), which every stacked segment must name."""
    try:
        record = read(state)
    except ValueError as e:
        return [str(e)]
    if strangers := [s for s in record if name is not None and s["by"] == "stacked" and name not in s["members"]]:
        return [f"steps_by names an ensemble {strangers[0]['members']} without this run ({name})"]
    return []


def read(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The record a checkpoint's training state holds ([] for none); ValueError naming what is wrong with it: a
    record is written at every save, so it ends at the checkpoint's step and holds a stacked stretch."""
    step = state.get("step")
    if "stacked" in state and "steps_by" in state:
        raise ValueError("the checkpoint holds both a stacked record and steps_by; a save writes one")
    if "stacked" in state:
        try:
            old = _Legacy.model_validate(state["stacked"])
        except ValidationError as e:
            raise ValueError(f"stacked {state['stacked']!r} is not {{size, members, step}}: {_first(e)}") from None
        if len(old.members) != old.size or not isinstance(step, int) or old.step > step:
            raise ValueError(f"stacked {state['stacked']!r} does not fit an ensemble stacked to a step <= {step}")
        return [{"to": old.step, "by": "stacked", "size": old.size, "members": old.members}]
    if "steps_by" not in state:
        return []
    try:
        segments = SEGMENTS.validate_python(state["steps_by"])
    except ValidationError as e:
        raise ValueError(f"steps_by is not a list of segments: {_first(e)}") from None
    ends = [s.to for s in segments]
    if not segments or ends != sorted(set(ends)) or not isinstance(step, int) or ends[-1] != step:
        raise ValueError(f"steps_by's segments do not end at rising steps, the last at the checkpoint's {step}: {ends}")
    if all(s.by == "solo" for s in segments):
        raise ValueError("steps_by records no stacked stretch (a run only ever solo keeps no record)")
    if any(a.by == b.by for a, b in zip(segments, segments[1:], strict=False)):
        raise ValueError("steps_by has two segments in a row taken by the same step")
    return [s.model_dump(exclude_none=True) for s in segments]


def _first(e: ValidationError) -> str:
    err = e.errors(include_url=False)[0]
    return f"{'.'.join(str(x) for x in err['loc'])} {err['msg']}".strip()


def extend(record: list[dict[str, Any]], by: dict[str, Any], since: int, step: int) -> list[dict[str, Any]]:
    """The record once the steps from `since` (where this process took the member up) to `step` were taken by
    `by` ({"by": "solo"} or a stacked segment without "to"): unchanged for a run that has only been solo."""
    if not record and by["by"] == "solo":
        return record
    record = [dict(s) for s in record]
    if not record and since > 0:  # its steps before this process's were all solo: a stacked one is recorded
        record.append({"to": since, "by": "solo"})
    if record and record[-1]["by"] == by["by"]:
        record[-1]["to"] = step
    else:
        record.append({"to": step, **by})
    return record


def text(record: list[dict[str, Any]]) -> str:
    """The record in words: 'stacked in an ensemble of 4 to step 20, solo to 30'."""
    return ", ".join(
        f"solo to step {s['to']}" if s["by"] == "solo" else f"stacked in an ensemble of {s['size']} to step {s['to']}"
        for s in record
    )
