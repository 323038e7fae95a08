"""What a launch says about where it runs, and whether that is inside a registry entry's scope.

A launch is in an entry's scope, outside it (it says enough to know: a Llama model, a single
server where the evidence is PD), or of unknown scope (it does not say: no model path, no
hardware). Only a launch in scope gets a finding; one of unknown scope gets a note. Pure.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
import re

from patchtool.registry.evidencescope import Mode, Role, Scope

# a Hugging Face hub id, org/name; a path that starts with '.', '/' or '~', or has more '/', is local
_HUB_ID = re.compile(r"[\w-][\w.-]*/[\w.-]+", re.ASCII)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Unstated:
    """A fact a launch sets from the environment it runs in (``--model-path $MODEL``): the file
    does not state it."""

    said: str  # how the file sets it

    def __str__(self) -> str:
        return self.said


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LaunchFacts:
    """What is known about where a launch runs (None or empty: it does not say)."""

    model: str | Unstated | None = None  # its --model-path
    hardware: str | None = None  # a CUDA architecture, e.g. sm_120
    mode: Mode | Unstated | None = None
    roles: frozenset[Role] = frozenset()


NOTHING_SAID = LaunchFacts()


class Verdict(enum.StrEnum):
    IN = "in scope"
    OUT = "out of scope"
    UNKNOWN = "scope unknown"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fit:
    verdict: Verdict
    why: tuple[str, ...] = ()  # for OUT: what is outside; for UNKNOWN: what the launch does not say


def fit(scope: Scope, launch: LaunchFacts) -> Fit:
    """Whether ``launch`` runs where ``scope`` says the evidence holds, and why not where it does not."""
    said = [check(scope, launch) for check in (_model, _hardware, _mode, _role)]
    outside = [why for verdict, why in said if verdict is Verdict.OUT]
    unknown = [why for verdict, why in said if verdict is Verdict.UNKNOWN]
    if outside:
        return Fit(verdict=Verdict.OUT, why=tuple(outside))
    unknown += [f"the evidence holds only at {c}, which a launch does not state" for c in scope.unstated]
    if unknown:
        return Fit(verdict=Verdict.UNKNOWN, why=tuple(unknown))
    return Fit(verdict=Verdict.IN)


def _model(scope: Scope, launch: LaunchFacts) -> tuple[Verdict, str]:
    if not scope.models:
        return Verdict.IN, ""
    if launch.model is None:
        return Verdict.UNKNOWN, "no model path (give --model)"
    if isinstance(launch.model, Unstated):
        return Verdict.UNKNOWN, f"the model path is set by {launch.model}, which the file does not state (give --model)"
    if any(fnmatch.fnmatch(launch.model.lower(), g.lower()) for g in scope.models):
        return Verdict.IN, ""
    if _HUB_ID.fullmatch(launch.model):  # a hub id names the model
        return Verdict.OUT, f"model {launch.model}"
    return Verdict.UNKNOWN, f"the model path {launch.model} does not name its model (give --model)"


def _hardware(scope: Scope, launch: LaunchFacts) -> tuple[Verdict, str]:
    if not scope.hardware:
        return Verdict.IN, ""
    if launch.hardware is None:
        return Verdict.UNKNOWN, "hardware not given (give --hardware)"
    if launch.hardware in scope.hardware:
        return Verdict.IN, ""
    return Verdict.OUT, f"hardware {launch.hardware}"


def _mode(scope: Scope, launch: LaunchFacts) -> tuple[Verdict, str]:
    if not scope.modes:
        return Verdict.IN, ""
    if launch.mode is None:
        return Verdict.UNKNOWN, "serving mode (PD or single server) not known"
    if isinstance(launch.mode, Unstated):
        return Verdict.UNKNOWN, f"serving mode (PD or single server) not stated: {launch.mode}"
    if launch.mode in scope.modes:
        return Verdict.IN, ""
    return Verdict.OUT, f"mode {launch.mode}"


def _role(scope: Scope, launch: LaunchFacts) -> tuple[Verdict, str]:
    if not scope.roles or launch.mode is Mode.SINGLE:
        return Verdict.IN, ""
    if not launch.roles:
        return Verdict.UNKNOWN, "PD role not known"
    if launch.roles & set(scope.roles):
        return Verdict.IN, ""
    return Verdict.OUT, f"role {', '.join(sorted(launch.roles))}"
