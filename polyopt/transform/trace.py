"""The replayable record of how a schedule was made: one :class:`Step` per primitive applied.

A step is the primitive's name, the loop names it was given and its keyword options, all plain
JSON values, so a trace prints as the Python that makes the schedule again
(:meth:`Trace.as_python`), travels as JSON (:meth:`Trace.to_json`, :meth:`Trace.from_json`), and
replays onto another schedule of the same kernel (:meth:`Trace.apply`). Schedulers record their
decisions as steps too, each with a ``note`` that says why.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from polyopt.errors import ScheduleError

if TYPE_CHECKING:  # the Schedule imports this module
    from polyopt.transform.schedule import Schedule


def _frozen(value):
    """A JSON value as a hashable one (lists -> tuples, dicts -> sorted item tuples)."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return ("__dict__",) + tuple((k, _frozen(v)) for k, v in value.items())
    return value


def _thawed(value):
    if isinstance(value, tuple) and value[:1] == ("__dict__",):
        return {k: _thawed(v) for k, v in value[1:]}
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    return value


@dataclass(frozen=True)
class Step:
    """One primitive applied: ``primitive(*loops, **options)``; ``note``: why (schedulers)."""

    primitive: str
    loops: tuple[str, ...] = ()
    options: tuple[tuple[str, object], ...] = ()
    note: str = ""

    @staticmethod
    def make(primitive: str, loops=(), note: str = "", **options) -> "Step":
        return Step(primitive, tuple(str(loop) for loop in loops),
                    tuple((k, _frozen(v)) for k, v in options.items() if v is not None), note)

    @property
    def kwargs(self) -> dict:
        return {k: _thawed(v) for k, v in self.options}

    def as_python(self) -> str:
        """The call, e.g. ``tile('i', 'j', sizes=[32, 32])``."""
        args = [repr(loop) for loop in self.loops] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.primitive}({', '.join(args)})"

    def __str__(self) -> str:
        return self.as_python() + (f"  # {self.note}" if self.note else "")

    def to_dict(self) -> dict:
        out: dict = {"primitive": self.primitive, "loops": list(self.loops), "options": self.kwargs}
        if self.note:
            out["note"] = self.note
        return out

    @staticmethod
    def from_dict(data: dict) -> "Step":
        if not isinstance(data, dict) or not isinstance(data.get("primitive"), str):
            raise ScheduleError(f"not a trace step: {data!r}")
        return Step.make(data["primitive"], data.get("loops", ()), data.get("note", ""), **data.get("options", {}))


@dataclass(frozen=True)
class Trace:
    """The steps that made a schedule, in order (a sequence: ``len``, iteration, indexing)."""

    steps: tuple[Step, ...] = ()

    def __len__(self) -> int:
        return len(self.steps)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __getitem__(self, index):
        return self.steps[index]

    def __add__(self, other: "Trace") -> "Trace":
        return Trace(self.steps + tuple(other))

    def appended(self, step: Step) -> "Trace":
        return Trace(self.steps + (step,))

    def as_python(self, name: str = "s") -> str:
        """The steps as Python statements on a schedule variable ``name``, notes as comments."""
        lines = []
        for step in self.steps:
            if step.note:
                lines.append(f"# {step.note}")
            lines.append(f"{name} = {name}.{step.as_python()}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return "\n".join(str(step) for step in self.steps)

    def to_json(self) -> str:
        return json.dumps([step.to_dict() for step in self.steps], indent=1)

    @staticmethod
    def from_json(text: str) -> "Trace":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScheduleError(f"trace JSON: {exc}") from None
        if not isinstance(data, list):
            raise ScheduleError("trace JSON must be a list of steps")
        return Trace(tuple(Step.from_dict(item) for item in data))

    def apply(self, schedule: "Schedule", *, check: bool = True) -> "Schedule":
        """Replay the steps onto ``schedule`` (a schedule of the same kernel, e.g. its original
        order); each step is checked by the verifier unless ``check=False``."""
        for step in self.steps:
            schedule = schedule.apply_step(step, check=check)
        return schedule
