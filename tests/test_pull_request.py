"""``patchtool export --pr ID DIR``: one patch and what it requires, as the patch set of one upstream
pull request that ``git am`` takes on the pin's upstream tag, with a description from the manifest;
a patch marked ``experiment`` is refused. The upstream is a real git repository in ``tmp_path``
with a ``python/demo/`` layout, pinned by its wheel (``demo/`` -> ``python/demo/``)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import Demo, edit
from helpers import git, snapshot
from test_cli import envelope

EVIDENCE = """
[[patch.evidence]]
metric = "greetings per second"
before = 3
after = 5
conditions = { machine = "a laptop" }
source = "bench run 7"
"""
KNOB = """
[[patch.knobs]]
name = "DEMO_SHOUT"
type = "env"
relation = "adds"
recommended = { all = "1" }
default = "0"
note = "off keeps the old greeting"
"""


def series(demo: Demo, *, greet_extra: str = "", shout_extra: str = "") -> None:
    """greet; util (unrelated); shout, which rewrites greet's line and requires it. The pin names
    the upstream repository's tag, as a pin of a project with a public repository does."""
    demo.commit_patch("0001-greet.patch", edit("python/demo/core.py", '"hello"', '"hi"'), "core: say hi")
    demo.commit_patch(
        "0002-util.patch", edit("python/demo/util.py", "return 1", "return 2"), "util: two", on="p-0001-greet.patch"
    )
    demo.commit_patch(
        "0003-shout.patch", edit("python/demo/core.py", '"hi"', '"HI"'), "core: shout", on="p-0002-util.patch"
    )
    demo.write_manifest(
        demo.entry("greet", "0001-greet.patch") + greet_extra,
        demo.entry("util", "0002-util.patch"),
        demo.entry("shout", "0003-shout.patch", why="louder") + 'requires = ["greet"]\n' + shout_extra,
    )
    pin = demo.root / "upstream-pins" / "demo-1.0.toml"
    pin.write_text(pin.read_text() + '\n[git]\nurl = "https://example.org/demo.git"\ntag = "v1.0"\n')
    git(demo.work, "tag", "v1.0", "upstream")


def test_export_pr_gives_what_git_am_takes_on_the_upstream_tag(demo: Demo, tmp_path: Path) -> None:
    series(demo, shout_extra=EVIDENCE + KNOB)
    out = tmp_path / "pr"
    before = snapshot(demo.root)
    res = demo.run("export", "--pr", "shout", str(out), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    data = envelope(res)["data"]
    assert data["patches"] == ["greet", "shout"]  # what it requires, first; util is not carried
    assert data["base"] == "https://example.org/demo.git at tag v1.0"
    assert sorted(p.name for p in out.iterdir()) == ["0001-greet.patch", "0003-shout.patch", "PULL_REQUEST.md"]
    assert snapshot(demo.root) == before  # the series is not touched
    for name in ("0001-greet.patch", "0003-shout.patch"):
        text = (out / name).read_text()
        assert text == (demo.root / "patches" / name).read_text()
        assert re.findall(r"^diff --git a/(\S+) b/", text, re.MULTILINE) == ["python/demo/core.py"]

    # git am on a clean clone of the upstream repository at the pin's tag
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(demo.work), str(clone))
    git(clone, "checkout", "-q", "v1.0")
    git(clone, "am", "-q", str(out / "0001-greet.patch"), str(out / "0003-shout.patch"))
    assert '"HI"' in (clone / "python/demo/core.py").read_text()
    assert git(clone, "log", "--format=%s", "-2").split("\n")[:2] == ["core: shout", "core: say hi"]

    described = (out / "PULL_REQUEST.md").read_text()
    assert described.startswith("# core: shout\n")
    assert "Applies with `git am` on https://example.org/demo.git at tag v1.0." in described
    assert "- `0001-greet.patch`: core: say hi" in described
    assert "## Why\n\nlouder\n" in described
    assert "- greetings per second: 3 -> 5\n  (machine: a laptop)\n  Source: bench run 7\n" in described
    assert "- `DEMO_SHOUT` (env, adds; default 0; recommended all: 1): off keeps the old greeting" in described


def test_export_pr_refuses_an_experiment_and_what_requires_one(demo: Demo, tmp_path: Path) -> None:
    series(demo, greet_extra='experiment = "no figure behind it yet"\n')
    before = snapshot(demo.root)
    res = demo.run("export", "--pr", "shout", str(tmp_path / "pr"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "patch 'shout' requires 'greet', which is an experiment, not a pull request: no figure behind it yet" in (
        res.stderr
    )
    res = demo.run("export", "--pr", "greet", str(tmp_path / "pr"))
    assert res.returncode == 2
    assert "patch 'greet' is an experiment, not a pull request: no figure behind it yet" in res.stderr
    assert "remove `experiment` from greet's entry" in res.stderr
    assert not (tmp_path / "pr").exists() and snapshot(demo.root) == before
    assert demo.run("export", "--pr", "util", str(tmp_path / "pr")).returncode == 0  # needs no experiment


def test_export_pr_refuses_a_bad_destination_or_id(demo: Demo, tmp_path: Path) -> None:
    series(demo)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("keep")
    res = demo.run("export", "--pr", "shout", str(busy))
    assert res.returncode == 2 and "exists and is not empty" in res.stderr
    assert [p.name for p in busy.iterdir()] == ["mine.txt"]
    res = demo.run("export", "--pr", "shout", str(demo.root / "patches"))
    assert res.returncode == 2 and "never writes into the series" in res.stderr
    res = demo.run("export", "--pr", "nope", str(tmp_path / "pr"))
    assert res.returncode == 2 and "no patch 'nope' in the series" in res.stderr
    res = demo.run("export", "--pr", "shout")
    assert res.returncode == 2 and "go together" in res.stderr
