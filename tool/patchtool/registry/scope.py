"""Where a rejection's evidence was measured (its scope), what a launch says about where it runs,
and whether the one is inside the other.

A launch is in an entry's scope, outside it (it says enough to know: a Llama model, a single
server where the evidence is PD), or of unknown scope (it does not say: no model path, no
hardware). Only a launch in scope gets a finding; one of unknown scope gets a note. Pure.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
import re
from collections.abc import Callable
from typing import Any

from patchtool.project.fields import Fields

HARDWARE_RE = re.compile(r"sm_[0-9]{2,3}")  # ASCII digits only: \d takes any Unicode digit
# a Hugging Face hub id, org/name; a path that starts with '.', '/' or '~', or has more '/', is local
_HUB_ID = re.compile(r"[\w-][\w.-]*/[\w.-]+", re.ASCII)


class Mode(enum.StrEnum):
    PD = "pd"  # prefill-decode disaggregation: one launch per role
    SINGLE = "single"  # one server doing both


class Role(enum.StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Unstated:
    """A fact a launch sets from the environment it runs in (``--model-path $MODEL``): the file
    does not state it."""

    said: str  # how the file sets it

    def __str__(self) -> str:
        return self.said


def hardware(text: str) -> str:
    """A CUDA architecture as sglang's kernels name it (``sm_120``); ValueError otherwise."""
    if not HARDWARE_RE.fullmatch(text):
        raise ValueError(f"{text!r} is not a CUDA architecture (e.g. 'sm_120')")
    return text


def model_glob(text: str) -> str:
    """A glob over model paths that names something (not only wildcards); ValueError otherwise."""
    if not re.search(r"[^*?\[\]!]", text):
        raise ValueError(f"{text!r} matches every model; leave 'models' out instead")
    return text


def _choice(kind: type[enum.StrEnum]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in tuple(kind):
            raise ValueError(f"unknown value {text!r}; expected one of {', '.join(kind)}")
        return text

    return parse


def _items(f: Fields, name: str, parse: Callable[[str], str]) -> list[str] | None:
    """The list ``name`` (absent: empty), each item parsed; None when a problem was recorded."""
    values = f.str_list(name, required=False)
    if values is None:
        return None if name in f.data else []
    out: list[str] = []
    for i, value in enumerate(values):
        try:
            out.append(parse(value))
        except ValueError as exc:
            f.problem(name, f"item {i}: {exc}")
    return out if len(out) == len(values) else None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LaunchFacts:
    """What is known about where a launch runs (None or empty: it does not say)."""

    model: str | Unstated | None = None  # its --model-path
    hardware: str | None = None  # a CUDA architecture, e.g. sm_120
    mode: Mode | Unstated | None = None
    roles: frozenset[Role] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": None if self.model is None else str(self.model),
            "hardware": self.hardware,
            "mode": None if self.mode is None else str(self.mode),
            "roles": sorted(r.value for r in self.roles),
        }


NOTHING_SAID = LaunchFacts()


class Verdict(enum.StrEnum):
    IN = "in scope"
    OUT = "out of scope"
    UNKNOWN = "scope unknown"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fit:
    verdict: Verdict
    why: tuple[str, ...] = ()  # for OUT: what is outside; for UNKNOWN: what the launch does not say


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Scope:
    """Where the evidence holds; an empty dimension holds everywhere."""

    models: tuple[str, ...] = ()  # globs over the model path, case-insensitive
    hardware: tuple[str, ...] = ()
    modes: tuple[Mode, ...] = ()
    roles: tuple[Role, ...] = ()  # within PD; a single server does both
    unstated: tuple[str, ...] = ()  # conditions of the evidence no launch states ("high concurrency")

    @classmethod
    def read(cls, f: Fields) -> Scope | None:
        models = _items(f, "models", model_glob)
        arch = _items(f, "hardware", hardware)
        modes = _items(f, "modes", _choice(Mode))
        roles = _items(f, "roles", _choice(Role))
        unstated = f.str_list("unstated", required=False) or ()
        f.done()
        if not f.data:
            f.problem(None, "an empty scope says nothing", hint="leave 'scope' out, or name models, hardware, modes")
            return None
        if models is None or arch is None or modes is None or roles is None:
            return None
        if roles and modes == [Mode.SINGLE]:
            f.problem("roles", 'a single server has no PD role: roles need modes = ["pd"]')
            return None
        return cls(
            models=tuple(models),
            hardware=tuple(arch),
            modes=tuple(Mode(m) for m in modes),
            roles=tuple(Role(r) for r in roles),
            unstated=tuple(unstated),
        )

    @property
    def everywhere(self) -> bool:
        return not (self.models or self.hardware or self.modes or self.roles or self.unstated)

    def fit(self, launch: LaunchFacts) -> Fit:
        outside: list[str] = []
        unknown: list[str] = []
        for check in (self._model, self._hardware, self._mode, self._role):
            verdict, why = check(launch)
            if verdict is Verdict.OUT:
                outside.append(why)
            elif verdict is Verdict.UNKNOWN:
                unknown.append(why)
        if outside:
            return Fit(verdict=Verdict.OUT, why=tuple(outside))
        unknown += [f"the evidence holds only at {c}, which a launch does not state" for c in self.unstated]
        if unknown:
            return Fit(verdict=Verdict.UNKNOWN, why=tuple(unknown))
        return Fit(verdict=Verdict.IN)

    def _model(self, launch: LaunchFacts) -> tuple[Verdict, str]:
        if not self.models:
            return Verdict.IN, ""
        if launch.model is None:
            return Verdict.UNKNOWN, "no model path (give --model)"
        if isinstance(launch.model, Unstated):
            return (
                Verdict.UNKNOWN,
                f"the model path is set by {launch.model}, which the file does not state (give --model)",
            )
        if any(fnmatch.fnmatch(launch.model.lower(), g.lower()) for g in self.models):
            return Verdict.IN, ""
        if _HUB_ID.fullmatch(launch.model):  # a hub id names the model
            return Verdict.OUT, f"model {launch.model}"
        return Verdict.UNKNOWN, f"the model path {launch.model} does not name its model (give --model)"

    def _hardware(self, launch: LaunchFacts) -> tuple[Verdict, str]:
        if not self.hardware:
            return Verdict.IN, ""
        if launch.hardware is None:
            return Verdict.UNKNOWN, "hardware not given (give --hardware)"
        if launch.hardware in self.hardware:
            return Verdict.IN, ""
        return Verdict.OUT, f"hardware {launch.hardware}"

    def _mode(self, launch: LaunchFacts) -> tuple[Verdict, str]:
        if not self.modes:
            return Verdict.IN, ""
        if launch.mode is None:
            return Verdict.UNKNOWN, "serving mode (PD or single server) not known"
        if isinstance(launch.mode, Unstated):
            return Verdict.UNKNOWN, f"serving mode (PD or single server) not stated: {launch.mode}"
        if launch.mode in self.modes:
            return Verdict.IN, ""
        return Verdict.OUT, f"mode {launch.mode}"

    def _role(self, launch: LaunchFacts) -> tuple[Verdict, str]:
        if not self.roles or launch.mode is Mode.SINGLE:
            return Verdict.IN, ""
        if not launch.roles:
            return Verdict.UNKNOWN, "PD role not known"
        if launch.roles & set(self.roles):
            return Verdict.IN, ""
        return Verdict.OUT, f"role {', '.join(sorted(launch.roles))}"

    def describe(self) -> str:
        if self.everywhere:
            return "everywhere"
        head = " ".join(
            p
            for p in (
                f"model {' or '.join(self.models)}" if self.models else "",
                f"on {' or '.join(self.hardware)}" if self.hardware else "",
            )
            if p
        )
        parts = [head] if head else []
        if self.modes:
            parts.append(" or ".join("PD" if m is Mode.PD else "single server" for m in self.modes))
        if self.roles:
            parts.append(f"{' or '.join(self.roles)} only")
        parts += [f"at {c}" for c in self.unstated]
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in ("models", "hardware", "modes", "roles", "unstated"):
            if value := getattr(self, name):
                out[name] = [str(v) for v in value]
        return out
