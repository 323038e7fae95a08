"""`patchtool retread ...` and the registry guard in `check`, through the real CLI."""

from __future__ import annotations

import json
import stat
import subprocess
import textwrap
from pathlib import Path

from cli_run import in_process
from conftest import Demo
from helpers import snapshot

REGISTRY = textwrap.dedent("""\
    # our rejected ideas; keep this comment
    schema = 1

    [[rejected]]
    id = "tbo"
    title = "Two-batch overlap"
    tried = "--enable-two-batch-overlap"
    verdict = "rejected"
    reason = "EP4 measured worse"
    revisit = "when V4 decode TBO is wired"

    [[rejected.evidence]]
    metric = "throughput"
    change = "worse"
    hardware = "sm_120"
    model = "demo"
    upstream = "1.0"
    source = "report"

    [[rejected.knobs]]
    type = "flag"
    name = "--enable-two-batch-overlap"

    [[rejected.revisit_when]]
    file = "python/demo/core.py"
    regex = 'def limit\\('
    appears = false
    why = "limit() is gone"

    [[rejected.revisit_when]]
    version = ">=1.0"
    why = "every 1.x"
    """)


def with_registry(demo: Demo) -> Demo:
    (demo.root / "retread.toml").write_text(REGISTRY)
    manifest = demo.root / "patchset.toml"
    manifest.write_text(
        manifest.read_text().replace('pin = "demo-1.0"\n', 'pin = "demo-1.0"\nregistry = "retread.toml"\n')
    )
    return demo


def add_script_patch(demo: Demo, body: str, overrides: str = "") -> None:
    def change(root: Path) -> None:
        (root / "python/demo/serve.py").write_text(body)

    demo.commit_patch("0002-serve.patch", change, "serve: launch arguments")
    demo.write_manifest(demo.entry("greet", "0001-greet.patch"), demo.entry("serve", "0002-serve.patch") + overrides)
    with_registry(demo)


def test_list_and_show(one_patch: Demo) -> None:
    with_registry(one_patch)
    res = one_patch.run("retread", "list")
    assert res.returncode == 0, res.stderr
    assert "tbo [rejected] Two-batch overlap" in res.stdout
    data = json.loads(one_patch.run("retread", "show", "tbo", "--json").stdout)
    assert data["command"] == "retread show" and data["data"]["reason"] == "EP4 measured worse"
    res = one_patch.run("retread", "show", "nope")
    assert res.returncode == 2 and "no rejected idea 'nope'; known: tbo" in res.stderr


def test_check_flags_a_patch_that_reintroduces_a_rejected_knob(one_patch: Demo) -> None:
    add_script_patch(one_patch, 'ARGS = ["--tp-size", "4", "--enable-two-batch-overlap"]\n')
    res = one_patch.run("check", "--json")
    data = json.loads(res.stdout)
    assert res.returncode == 1
    (problem,) = data["errors"]
    assert problem["file"] == "patches/0002-serve.patch" and problem["patch"] == "serve"
    assert problem["line"] == 12
    assert problem["message"] == (
        "'--enable-two-batch-overlap' in python/demo/serve.py re-introduces rejected idea "
        "'tbo' (flag --enable-two-batch-overlap): EP4 measured worse"
    )
    lines = (one_patch.root / "patches/0002-serve.patch").read_text().splitlines()
    assert "--enable-two-batch-overlap" in lines[11]


def test_override_silences_the_finding_but_still_shows_it(one_patch: Demo) -> None:
    add_script_patch(
        one_patch,
        'ARGS = ["--enable-two-batch-overlap"]\n',
        overrides=textwrap.dedent("""\
        [[patch.overrides]]
        entry = "tbo"
        justification = "prefill-only A/B on EP8 hardware"
        """),
    )
    res = one_patch.run("check")
    assert res.returncode == 0, res.stdout
    assert (
        "override: patches/0002-serve.patch:12 (python/demo/serve.py): '--enable-two-batch-overlap' "
        "re-introduces rejected idea 'tbo' (flag --enable-two-batch-overlap); overridden by patch serve: "
        "prefill-only A/B on EP8 hardware" in res.stdout
    )
    data = json.loads(one_patch.run("check", "--json").stdout)["data"]["registry"]
    assert data["findings"] == [] and data["overrides"][0]["override"] == "prefill-only A/B on EP8 hardware"


def test_override_naming_no_entry_is_an_error(one_patch: Demo) -> None:
    add_script_patch(one_patch, "X = 1\n", overrides='[[patch.overrides]]\nentry = "tb0"\njustification = "typo"\n')
    res = one_patch.run("check", "--json")
    errors = json.loads(res.stdout)["errors"]
    assert res.returncode == 1
    assert errors == [
        {
            "message": "overrides 'tb0', which is not in the registry",
            "file": "patchset.toml",
            "key": "patch[1].overrides[0].entry",
            "patch": "serve",
            "hint": "known entries: tbo",
            "code": "invalid",
        }
    ]


def test_broken_registry_is_reported_by_check(one_patch: Demo) -> None:
    with_registry(one_patch)
    path = one_patch.root / "retread.toml"
    path.write_text(path.read_text().replace('reason = "EP4 measured worse"\n', ""))
    res = one_patch.run("check")
    assert res.returncode == 1
    assert "retread.toml:4: entry tbo: rejected[0].reason: missing required key" in res.stdout


def test_scan_deployment_files(one_patch: Demo) -> None:
    with_registry(one_patch)
    script = one_patch.root / "deploy" / "decode.sh"
    script.parent.mkdir()
    script.write_text("python -m sglang.launch_server \\\n  --tp-size 4 \\\n  --enable-two-batch-overlap\n")
    (one_patch.root / "deploy" / "ok.env").write_text("A=1\n")
    res = one_patch.run("retread", "scan", "deploy")
    assert res.returncode == 1
    assert (
        "deploy/decode.sh:3: '--enable-two-batch-overlap' re-introduces rejected idea 'tbo' "
        "(flag --enable-two-batch-overlap): EP4 measured worse"
    ) in res.stdout
    res = one_patch.run("retread", "scan", str(one_patch.root / "deploy" / "ok.env"), "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["data"]["findings"] == []


def test_revisit_against_the_pin(one_patch: Demo) -> None:
    with_registry(one_patch)
    data = json.loads(one_patch.run("retread", "revisit", "--json").stdout)["data"]
    assert data["pin"] == "demo-1.0" and data["due"] == ["tbo"]
    assert [c["holds"] for c in data["conditions"]] == [False, True]
    assert data["conditions"][0]["detail"] == "found in python/demo/core.py"


def test_add_appends_keeping_comments_and_order(one_patch: Demo) -> None:
    with_registry(one_patch)
    before = (one_patch.root / "retread.toml").read_text()
    res = one_patch.run(
        "retread",
        "add",
        "--id",
        "ep4",
        "--title",
        "EP4",
        "--tried",
        "--ep-size 4",
        "--reason",
        "worse than TP4",
        "--revisit",
        "with NVLink",
        "--metric",
        "throughput",
        "--change",
        "worse",
        "--source",
        "report",
        "--flag",
        "--ep-size=[2-9]",
        "--env",
        "NCCL_ALGO=(?i).*tree.*",
    )
    assert res.returncode == 0, res.stdout + res.stderr
    after = (one_patch.root / "retread.toml").read_text()
    assert after.startswith(before)  # nothing above the new entry moved or lost its comments
    assert "values = '[2-9]'" in after
    listing = one_patch.run("retread", "list", "--json")
    assert [e["id"] for e in json.loads(listing.stdout)["data"]["entries"]] == ["tbo", "ep4"]


def test_add_refuses_an_invalid_entry_and_writes_nothing(one_patch: Demo) -> None:
    with_registry(one_patch)
    before = snapshot(one_patch.root)
    common = [
        "--title",
        "again",
        "--tried",
        "x",
        "--reason",
        "y",
        "--revisit",
        "z",
        "--metric",
        "m",
        "--change",
        "c",
        "--source",
        "s",
    ]
    res = one_patch.run("retread", "add", "--id", "tbo", *common)
    assert res.returncode == 1
    assert (
        "retread.toml: entry tbo: rejected[1].id: duplicate entry id 'tbo' (also rejected[0]) "
        "(hint: every rejected idea needs its own id)"
    ) in res.stderr
    res = one_patch.run("retread", "add", "--id", "other", *common, "--pattern", "(")
    assert res.returncode == 1
    assert (
        "retread.toml: entry other: rejected[1].knobs[0].regex: invalid regular expression '(': "
        "RE2 refuses it: missing ): ("
    ) in res.stderr
    assert snapshot(one_patch.root) == before
    res = one_patch.run("retread", "add", "--id", "new", "--title", "t", "--tried", "x", "--revisit", "z")
    assert res.returncode == 1 and "rejected[1].reason: missing required key" in res.stderr
    assert "rejected[1].evidence: missing required key" in res.stderr
    assert snapshot(one_patch.root) == before


def test_add_from_an_editor_template(one_patch: Demo, tmp_path: Path) -> None:
    with_registry(one_patch)
    editor = tmp_path / "editor.sh"
    editor.write_text(
        textwrap.dedent("""\
        #!/bin/sh
        cat > "$1" <<'EOT'
        [[rejected]]
        id = "mscclpp"
        title = "mscclpp"
        tried = "--enable-mscclpp"
        verdict = "rejected"
        reason = "0% gain"
        revisit = "never"
        [[rejected.evidence]]
        metric = "throughput"
        change = "0%"
        source = "report"
        [[rejected.knobs]]
        type = "flag"
        name = "--enable-mscclpp"
        EOT
        """)
    )
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    res = one_patch.run("retread", "add", "--edit", env={"EDITOR": str(editor), "VISUAL": ""})
    assert res.returncode == 0, res.stderr
    assert "added mscclpp to retread.toml" in res.stdout
    assert "mscclpp" in one_patch.run("retread", "list").stdout


# -- drop --rejected: an entry the guard can see, or one that says it cannot ----------------------

EVIDENCE = '\n[[patch.evidence]]\nmetric = "latency"\nbefore = 10\nafter = 12\nsource = "bench run 7"\n'
ADDS_A_FLAG = (
    '\n[[patch.knobs]]\nname = "--fast-greet"\ntype = "flag"\nrelation = "adds"\nrecommended = { all = "on" }\n'
)


def droppable(demo: Demo, knobs: str = "") -> Demo:
    demo.write_manifest(demo.entry("greet", "0001-greet.patch") + EVIDENCE + knobs)
    return with_registry(demo)


def test_drop_rejected_refuses_an_entry_no_knob_could_match(one_patch: Demo) -> None:
    droppable(one_patch)
    before = snapshot(one_patch.root)
    res = one_patch.run("drop", "greet", "--reason", "slower", "--rejected")
    assert res.returncode == 2
    assert (
        "patch 'greet' adds no knob, so its registry entry would be invisible: neither `check` nor "
        "`retread scan` could ever see the idea come back"
    ) in res.stderr
    assert "--flag, --env, --config, --pattern" in res.stderr and "--unguarded" in res.stderr
    assert snapshot(one_patch.root) == before
    res = one_patch.run("drop", "greet", "--reason", "slower", "--flag", "--fast-greet")
    assert res.returncode == 2 and "add --rejected" in res.stderr
    assert snapshot(one_patch.root) == before


def test_drop_rejected_takes_the_knobs_it_is_given(one_patch: Demo) -> None:
    droppable(one_patch)
    res = one_patch.run(
        "drop", "greet", "--reason", "slower", "--rejected", "--flag", "--greeting=hi|hey", "--env", "DEMO_GREET"
    )
    assert res.returncode == 0, res.stdout + res.stderr
    entry = json.loads(one_patch.run("retread", "show", "greet", "--json").stdout)["data"]
    assert entry["knobs"] == [
        {"type": "flag", "name": "--greeting", "values": "hi|hey"},
        {"type": "env", "name": "DEMO_GREET"},
    ]
    (one_patch.root / "serve.sh").write_text("python -m demo --greeting hey\n")
    res = one_patch.run("retread", "scan", "serve.sh")
    assert res.returncode == 1 and "re-introduces rejected idea 'greet'" in res.stdout


def test_drop_rejected_keeps_the_knobs_the_patch_added(one_patch: Demo) -> None:
    droppable(one_patch, ADDS_A_FLAG)
    res = one_patch.run("drop", "greet", "--reason", "slower", "--rejected")
    assert res.returncode == 0, res.stdout + res.stderr
    entry = json.loads(one_patch.run("retread", "show", "greet", "--json").stdout)["data"]
    assert entry["knobs"] == [{"type": "flag", "name": "--fast-greet"}] and "unguarded" not in entry


def test_drop_rejected_unguarded_says_the_guard_cannot_see_it(one_patch: Demo) -> None:
    droppable(one_patch)
    res = one_patch.run("drop", "greet", "--reason", "slower", "--rejected", "--unguarded", "a greeting has no switch")
    assert res.returncode == 0, res.stdout + res.stderr
    assert 'unguarded = "a greeting has no switch"' in (one_patch.root / "retread.toml").read_text()
    shown = one_patch.run("retread", "show", "greet").stdout
    assert "  - (no knob)\nthe guard cannot see: a greeting has no switch\n" in shown
    assert "the guard cannot see: a greeting has no switch" in one_patch.run("retread", "list").stdout


# -- revisit: a recorded measurement ------------------------------------------------------------


def test_revisit_reports_a_recorded_measurement(one_patch: Demo) -> None:
    with_registry(one_patch)
    path = one_patch.root / "retread.toml"
    path.write_text(
        path.read_text()
        + textwrap.dedent("""
        [[rejected.revisit_when]]
        observed = "255 registers, 364 B spill stores"
        source = "measured here: a compile"
        why = "spills are what it waited for"
        """)
    )
    data = json.loads(one_patch.run("retread", "revisit", "--json").stdout)["data"]
    assert data["conditions"][2] == {
        "entry": "tbo",
        "condition": "a recorded measurement (not evaluated against the upstream)",
        "holds": True,
        "why": "spills are what it waited for",
        "detail": "measured: 255 registers, 364 B spill stores (source: measured here: a compile)",
    }
    path.write_text(path.read_text().replace('source = "measured here: a compile"\n', ""))
    res = one_patch.run("retread", "revisit")
    assert res.returncode == 1
    assert (
        "rejected[0].revisit_when[2].source: a recorded measurement needs observed = '<what was measured>' "
        "and its source"
    ) in res.stderr


# -- the real deployment files -------------------------------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def test_scan_passes_the_production_manifests_and_catches_edited_ones(tmp_path: Path) -> None:
    def scan(*paths: Path) -> subprocess.CompletedProcess[str]:
        return in_process(["retread", "scan", *map(str, paths), "--hardware", "sm_120", "--json"], cwd=REPO)

    deploy = REPO / "tests" / "data" / "deploy"
    res = scan(deploy)
    assert res.returncode == 0, res.stdout + res.stderr
    k8s = tmp_path / "k8s-pd.yaml"
    k8s.write_text((deploy / "k8s-pd.yaml").read_text().replace('value: "0"', 'value: "1"'))
    compose = tmp_path / "docker-compose.yaml"
    compose.write_text(
        (deploy / "docker-compose.yaml")
        .read_text()
        .replace(
            "      - SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0\n",
            "      - SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0\n    restart: on-failure\n",
        )
    )
    res = scan(k8s, compose)
    assert res.returncode == 1
    findings = [(Path(f["file"]).name, f["line"], f["entry"]) for f in json.loads(res.stdout)["data"]["findings"]]
    assert findings == [
        ("k8s-pd.yaml", 75, "multi-stream-overlap-decode"),  # its name: line
        ("docker-compose.yaml", 50, "restart-decode-alone"),
    ]


def test_the_registry_s_strings_reach_a_terminal_escaped(one_patch: Demo) -> None:
    """A registry is a stranger's file too: `retread list`, `show` and `revisit` print its strings
    with every control character escaped, so none can clear the screen, overwrite or recolour."""
    with_registry(one_patch)
    path = one_patch.root / "retread.toml"
    hostile = (
        path.read_text()
        .replace('title = "Two-batch overlap"', 'title = "Two-batch\\u001b[2J overlap"')
        .replace('reason = "EP4 measured worse"', 'reason = "EP4\\r measured worse"')
        .replace('why = "every 1.x"', 'why = "every\\u202e 1.x"')
    )
    path.write_text(hostile)
    shown = [one_patch.run("retread", *args) for args in (["list"], ["show", "tbo"], ["revisit"])]
    for res in shown:
        assert res.returncode in (0, 1), res.stdout + res.stderr
        assert "\x1b" not in res.stdout and "\r" not in res.stdout and "\u202e" not in res.stdout, res.stdout
    assert "tbo [rejected] Two-batch\\x1b[2J overlap" in shown[0].stdout
    assert "reason:  EP4\\r measured worse" in shown[1].stdout
    assert "every\\u202e 1.x" in shown[2].stdout
