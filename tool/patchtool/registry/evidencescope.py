"""Where a rejection's evidence was measured (its scope), as the registry states it: models,
hardware, serving modes and roles. Whether a launch runs there is the launch's reader's to say
(``patchtool.sglang.launch``). Pure.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable
from typing import Any

from patchtool.project.fields import Fields

HARDWARE_RE = re.compile(r"sm_[0-9]{2,3}")  # ASCII digits only: \d takes any Unicode digit


class Mode(enum.StrEnum):
    PD = "pd"  # prefill-decode disaggregation: one launch per role
    SINGLE = "single"  # one server doing both


class Role(enum.StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"


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
    if (values := f.str_list(name, required=False)) is None:
        return None if name in f.data else []
    out: list[str] = []
    for i, value in enumerate(values):
        try:
            out.append(parse(value))
        except ValueError as exc:
            f.problem(name, f"item {i}: {exc}")
    return out if len(out) == len(values) else None


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

    def describe(self) -> str:
        if self.everywhere:
            return "everywhere"
        head = [f"model {' or '.join(self.models)}"] if self.models else []
        head += [f"on {' or '.join(self.hardware)}"] if self.hardware else []
        parts = [" ".join(head)] if head else []
        parts += [" or ".join("PD" if m is Mode.PD else "single server" for m in self.modes)] if self.modes else []
        parts += [f"{' or '.join(self.roles)} only"] if self.roles else []
        parts += [f"at {c}" for c in self.unstated]
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        names = ("models", "hardware", "modes", "roles", "unstated")
        return {name: [str(v) for v in value] for name in names if (value := getattr(self, name))}
