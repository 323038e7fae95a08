"""`patchtool show ID` (one patch, all of it) and `patchtool edit ID` (its metadata, validated,
comments kept), and the shell completion of ids and pins."""

from __future__ import annotations

from conftest import Demo

RICH = """
# the greeting patch: keep this comment
[[patch]]
id = "greet"
file = "patches/0001-greet.patch"
kind = "performance"  # measured on H200
owner = "team"
why = "Shorter greeting."
applies_to = ">=1.0"
drop_when = "upstream fixes it"
upstream = { status = "pending" }

[[patch.evidence]]
metric = "throughput"
change = "+12%"
conditions = { hardware = "H200" }
source = "bench/greet.md"

[[patch.knobs]]
name = "DEMO_GREET"
type = "env"
relation = "adds"
recommended = { all = "1" }

[[patch.assumptions]]
id = "greet-there"
file = "python/demo/core.py"
regex = 'def greet'
count = 1
why = "the patch edits greet()"

[[patch.assumptions]]
id = "no-wave"
file = "python/demo/wave.py"
why = "a wave() would need the same change"

[[patch.gpu_verification]]
run = "python -m pytest tests/gpu/test_greet.py"
expect = "the greeting is short"
"""


def rich(one_patch: Demo) -> Demo:
    (one_patch.root / "patchset.toml").write_text('schema = 1\npin = "demo-1.0"\n' + RICH)
    return one_patch


def test_show_explore(one_patch: Demo) -> None:
    rich(one_patch)
    res = one_patch.run("show", "greet", "--diff")
    print(res.stdout, res.stderr)
    res = one_patch.run("show", "greet", "--json")
    print(res.stdout, res.stderr)
    res = one_patch.run("edit", "greet", "--kind", "bogus")
    print(res.stdout, res.stderr)
    res = one_patch.run(
        "edit",
        "greet",
        "--why",
        "new why",
        "--upstream-status",
        "submitted",
        "--upstream-url",
        "https://github.com/x/y/pull/1",
    )
    print(res.stdout, res.stderr)
    print((one_patch.root / "patchset.toml").read_text())
    assert 0
