"""`retread scan` applies an entry only where a launch is in the scope of its evidence (model,
hardware, PD mode and role, recorded in retread.toml); where a launch does not say enough to
know, the use is a note ("scope unknown"), not a finding. Through the real CLI on the real
registry, and the scope's validation on plain dicts."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from cli_run import in_process
from helpers import snapshot
from patchtool.errors import InvalidInput
from patchtool.registry import entries as reg

REPO = Path(__file__).resolve().parents[2]

LLAMA = "python3 -m sglang.launch_server \\\n  --model-path meta-llama/Llama-3.1-8B-Instruct \\\n  --tp-size 4 --port 30000\n"
# the production decode launch without --disable-overlap-schedule and bf16 index keys
DSV4_PD = (
    "python3 -m sglang.launch_server \\\n  --model-path nvidia/DeepSeek-V4-Flash-NVFP4 \\\n  --tp-size 4 \\\n"
    "  --disaggregation-mode decode \\\n  --port 30001\n"
)
NO_MODEL = "python3 -m sglang.launch_server \\\n  --tp-size 4 --port 30000\n"


def scan(tmp_path: Path, name: str, text: str, *options: str) -> tuple[int, dict[str, Any]]:
    path = tmp_path / name
    path.write_text(text)
    before = snapshot(tmp_path), snapshot(REPO / "retread.toml")
    res = in_process(["retread", "scan", str(path), *options, "--json"], cwd=REPO)
    assert (snapshot(tmp_path), snapshot(REPO / "retread.toml")) == before  # a scan writes nothing
    assert res.stderr == "" or "Traceback" not in res.stderr, res.stderr
    return res.returncode, json.loads(res.stdout)


def test_a_llama_launch_is_not_held_to_deepseek_v4_evidence(tmp_path: Path) -> None:
    for options in ((), ("--hardware", "sm_120")):
        code, out = scan(tmp_path, "serve.sh", LLAMA, *options)
        assert code == 0 and out["status"] == "ok", out
        assert out["data"]["findings"] == [] and out["data"]["notes"] == [], options


def test_a_deepseek_v4_pd_launch_still_gets_its_findings(tmp_path: Path) -> None:
    code, out = scan(tmp_path, "decode.sh", DSV4_PD, "--hardware", "sm_120")
    assert code == 1 and out["status"] == "problems"
    findings = out["data"]["findings"]
    assert [(f["line"], f["entry"]) for f in findings] == [(1, "fp8-index-keys"), (1, "overlap-schedule")]
    assert findings[1]["scope"] == {"models": ["*DeepSeek-V4*"], "hardware": ["sm_120"], "modes": ["pd"]}
    assert findings[1]["knob"] == "flag --disable-overlap-schedule missing from an sglang launch"
    assert out["data"]["notes"] == [] and out["data"]["assumed"] == {"model": None, "hardware": "sm_120"}


def test_a_launch_that_names_no_model_gets_a_note_not_a_finding(tmp_path: Path) -> None:
    code, out = scan(tmp_path, "serve.sh", NO_MODEL, "--hardware", "sm_120")
    assert code == 0 and out["data"]["findings"] == []
    notes = {n["entry"]: n for n in out["data"]["notes"]}
    assert set(notes) == {"fp8-index-keys"}  # overlap-schedule's PD scope: a single server is outside it
    assert notes["fp8-index-keys"]["unknown"] == ["no model path (give --model)"]
    assert notes["fp8-index-keys"]["scope"] == {"models": ["*DeepSeek-V4*"], "hardware": ["sm_120"]}
    res = in_process(["retread", "scan", str(tmp_path / "serve.sh"), "--hardware", "sm_120"], cwd=REPO)
    assert res.returncode == 0
    assert (
        f"note: {tmp_path / 'serve.sh'}:1: 'python3 -m sglang.launch_server \\\\' would re-introduce rejected idea "
        "'fp8-index-keys' (flag --enable-deepseek-v4-bf16-indexer missing from an sglang launch) where its "
        "evidence holds (model *DeepSeek-V4* on sm_120); scope unknown: no model path (give --model)"
    ) in res.stdout
    assert "1 note(s): scope unknown, not findings" in res.stdout
    # a local directory does not name its model either; --model says what it is
    local = NO_MODEL.replace("--tp-size 4", "--model-path /models/ckpt --tp-size 4")
    code, out = scan(tmp_path, "serve.sh", local, "--hardware", "sm_120")
    assert code == 0 and [n["unknown"] for n in out["data"]["notes"]] == [
        ["the model path /models/ckpt does not name its model (give --model)"]
    ]
    code, out = scan(
        tmp_path, "serve.sh", NO_MODEL, "--hardware", "sm_120", "--model", "nvidia/DeepSeek-V4-Flash-NVFP4"
    )
    assert code == 1 and [f["entry"] for f in out["data"]["findings"]] == ["fp8-index-keys"]


def test_unknown_hardware_is_a_note(tmp_path: Path) -> None:
    code, out = scan(tmp_path, "decode.sh", DSV4_PD)
    assert code == 0 and out["data"]["findings"] == []
    assert [(n["entry"], n["unknown"]) for n in out["data"]["notes"]] == [
        ("fp8-index-keys", ["hardware not given (give --hardware)"]),
        ("overlap-schedule", ["hardware not given (give --hardware)"]),
    ]
    code, out = scan(tmp_path, "decode.sh", DSV4_PD, "--hardware", "sm_100")
    assert code == 0 and out["data"] == {
        "assumed": {"model": None, "hardware": "sm_100"},
        "findings": [],
        "notes": [],
    }


def test_a_bad_hardware_option_is_a_usage_error(tmp_path: Path) -> None:
    code, out = scan(tmp_path, "decode.sh", DSV4_PD, "--hardware", "blackwell")
    assert code == 2 and out["status"] == "usage-error"
    assert out["errors"][0]["message"] == "--hardware: 'blackwell' is not a CUDA architecture (e.g. 'sm_120')"


def test_absence_rules_apply_only_in_scope(tmp_path: Path) -> None:
    # a single DSv4 server without --disable-overlap-schedule: the overlap evidence is PD only
    single = DSV4_PD.replace("  --disaggregation-mode decode \\\n", "")
    code, out = scan(tmp_path, "serve.sh", single, "--hardware", "sm_120")
    assert code == 1 and [f["entry"] for f in out["data"]["findings"]] == ["fp8-index-keys"]
    # multi-stream overlap on is rejected on decode only; a DSv4 prefill launch keeps it
    prefill = "export SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1\n" + DSV4_PD.replace("decode \\", "prefill \\").replace(
        "  --tp-size 4 \\\n",
        "  --tp-size 4 --enable-deepseek-v4-bf16-indexer --disable-overlap-schedule --enable-hierarchical-cache \\\n",
    )
    code, out = scan(tmp_path, "serve.sh", prefill, "--hardware", "sm_120")
    assert (code, out["data"]["findings"], out["data"]["notes"]) == (0, [], [])


def test_every_entry_carries_the_scope_of_its_evidence() -> None:
    registry = reg.parse_text((REPO / "retread.toml").read_text(), file="retread.toml")
    for e in registry.entries:
        assert e.scope.models, e.id  # every field report measured DeepSeek-V4
        rows = " ".join(m.hardware or "" for m in e.evidence)
        assert all(h in rows for h in e.scope.hardware), e.id
        if e.scope.modes == ("pd",):
            assert any("PD:" in (m.hardware or "") for m in e.evidence), e.id
    assert (
        reg.parse_text((REPO / "retread.toml").read_text(), file="retread.toml").get("hicache-size-v4").scope.hardware
        == ()
    )


# -- a bad scope names file, entry, key and line -------------------------------------------------


def broken(
    change: str, into: str = '[rejected.scope]\nmodels = ["*DeepSeek-V4*"]\nhardware = ["sm_120"]\nmodes = ["pd"]\n'
) -> list[str]:
    text = (REPO / "retread.toml").read_text()
    assert into in text
    with pytest.raises(InvalidInput) as exc:
        reg.parse_text(text.replace(into, change, 1), file="retread.toml")
    return [p.render() for p in exc.value.problems]


def test_a_bad_scope_is_reported_with_its_entry_and_line() -> None:
    line = (REPO / "retread.toml").read_text().splitlines().index('modes = ["pd"]') + 1
    assert broken('[rejected.scope]\nmodels = ["*DeepSeek-V4*"]\nhardware = ["sm_120"]\nmodes = ["pdd"]\n') == [
        f"retread.toml:{line}: entry index-topk-1024: rejected[0].scope.modes: item 0: unknown value 'pdd'; "
        "expected one of pd, single"
    ]
    assert broken('[rejected.scope]\nmodels = ["*DeepSeek-V4*"]\nhardware = ["blackwell"]\nmodes = ["pd"]\n') == [
        f"retread.toml:{line - 1}: entry index-topk-1024: rejected[0].scope.hardware: item 0: 'blackwell' is not a "
        "CUDA architecture (e.g. 'sm_120')"
    ]
    assert broken('[rejected.scope]\nmodels = ["*"]\nhardware = ["sm_120"]\nmodes = ["pd"]\n') == [
        f"retread.toml:{line - 2}: entry index-topk-1024: rejected[0].scope.models: item 0: '*' matches every model; "
        "leave 'models' out instead"
    ]
    assert broken('[rejected.scope]\nmodels = ["*DeepSeek-V4*"]\nmodes = ["single"]\nroles = ["decode"]\n') == [
        f"retread.toml:{line}: entry index-topk-1024: rejected[0].scope.roles: a single server has no PD role: "
        'roles need modes = ["pd"]'
    ]
    assert broken('[rejected.scope]\nmodel = ["*DeepSeek-V4*"]\n') == [
        f"retread.toml:{line - 2}: entry index-topk-1024: rejected[0].scope.model: unknown key "
        "(hint: check the spelling against docs/manifest.md)"
    ]


def test_a_bad_scope_fails_the_command_with_its_exit_code(tmp_path: Path) -> None:
    text = (REPO / "retread.toml").read_text().replace('modes = ["pd"]', 'modes = ["pdd"]', 1)
    data = tomllib.loads(text)
    assert data["rejected"][0]["scope"]["modes"] == ["pdd"]
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "retread.toml").write_text(text)
    (repo / "patchset.toml").write_text((REPO / "patchset.toml").read_text())
    res = in_process(["retread", "list"], cwd=repo)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "entry index-topk-1024: rejected[0].scope.modes: item 0: unknown value 'pdd'" in res.stdout + res.stderr


def test_a_scope_decides_dimension_by_dimension() -> None:
    from patchtool.registry.evidencescope import Mode, Role, Scope
    from patchtool.sglang.launch import LaunchFacts, Verdict
    from patchtool.sglang.launch import fit as fits

    scope = Scope(models=("*DeepSeek-V4*",), hardware=("sm_120",), modes=(Mode.PD,), roles=(Role.DECODE,))
    dsv4 = "nvidia/DeepSeek-V4-Flash-NVFP4"

    def fit(**facts: Any) -> tuple[Verdict, tuple[str, ...]]:
        found = fits(scope, LaunchFacts(**{"model": dsv4, "hardware": "sm_120", "mode": Mode.PD, **facts}))
        return found.verdict, found.why

    assert fit(roles=frozenset({Role.DECODE})) == (Verdict.IN, ())
    assert fit(roles=frozenset({Role.PREFILL})) == (Verdict.OUT, ("role prefill",))
    assert fit(mode=Mode.SINGLE) == (Verdict.OUT, ("mode single",))
    assert fit() == (Verdict.UNKNOWN, ("PD role not known",))
    # what is known to be outside wins over what is not known
    assert fit(model="meta-llama/Llama-3.1-8B-Instruct", hardware=None, mode=None) == (
        Verdict.OUT,
        ("model meta-llama/Llama-3.1-8B-Instruct",),
    )
    assert fits(scope, LaunchFacts()).why == (
        "no model path (give --model)",
        "hardware not given (give --hardware)",
        "serving mode (PD or single server) not known",
        "PD role not known",
    )
    # a single server does both roles
    decode_only = Scope(roles=(Role.DECODE,))
    assert fits(decode_only, LaunchFacts(mode=Mode.SINGLE)).verdict is Verdict.IN
    assert scope.describe() == "model *DeepSeek-V4* on sm_120, PD, decode only"


# -- launch facts read as the launch's shell and sglang's argparse read them ----------------------

TBO_PD = (
    "python -m sglang.launch_server --model-path nvidia/DeepSeek-V4-Flash-NVFP4 --disaggregation-mode decode "
    "--enable-two-batch-overlap --disable-overlap-schedule\n"
)


def entries_of(out: dict[str, Any]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    data = out["data"]
    return [f["entry"] for f in data["findings"]], [(n["entry"], n["unknown"]) for n in data["notes"]]


def test_a_role_the_file_does_not_state_is_unknown_not_a_single_server(tmp_path: Path) -> None:
    code, out = scan(tmp_path, "serve.sh", TBO_PD, "--hardware", "sm_120")
    assert code == 1 and entries_of(out) == (["fp8-index-keys", "two-batch-overlap"], [])
    for role in ("$ROLE", '"${ROLE}"', "`cat /etc/role`", "$(cat /etc/role)"):
        code, out = scan(tmp_path, "serve.sh", TBO_PD.replace("decode", role), "--hardware", "sm_120")
        said = role
        assert code == 1 and entries_of(out) == (
            ["fp8-index-keys"],  # its scope has no mode: in scope either way
            [
                (
                    "two-batch-overlap",
                    [f"serving mode (PD or single server) not stated: --disaggregation-mode {said}"],
                )
            ],
        ), role


def test_a_model_path_the_file_does_not_state_is_unknown(tmp_path: Path) -> None:
    text = TBO_PD.replace("nvidia/DeepSeek-V4-Flash-NVFP4", '"$MODEL"')
    code, out = scan(tmp_path, "serve.sh", text, "--hardware", "sm_120")
    unknown = ['the model path is set by --model-path "$MODEL", which the file does not state (give --model)']
    assert code == 0 and entries_of(out) == ([], [("fp8-index-keys", unknown), ("two-batch-overlap", unknown)])
    res = in_process(["retread", "scan", str(tmp_path / "serve.sh"), "--hardware", "sm_120"], cwd=REPO)
    assert res.returncode == 0 and f"scope unknown: {unknown[0]}" in res.stdout
    code, out = scan(tmp_path, "serve.sh", text, "--hardware", "sm_120", "--model", "nvidia/DeepSeek-V4-Flash-NVFP4")
    assert code == 1 and entries_of(out) == (["fp8-index-keys", "two-batch-overlap"], [])


def test_a_local_model_path_does_not_name_its_model(tmp_path: Path) -> None:
    for path in ("./weights", "../ckpt/v4", "~/weights", "/models/ckpt", "models/nvidia/ckpt", ".cache/ckpt"):
        code, out = scan(
            tmp_path, "serve.sh", TBO_PD.replace("nvidia/DeepSeek-V4-Flash-NVFP4", path), "--hardware", "sm_120"
        )
        unknown = [f"the model path {path} does not name its model (give --model)"]
        assert code == 0 and entries_of(out) == ([], [("fp8-index-keys", unknown), ("two-batch-overlap", unknown)]), (
            path
        )
    # a local path that matches the scope's glob is in scope; a hub id that does not is outside
    code, out = scan(tmp_path, "serve.sh", TBO_PD.replace("nvidia/", "/models/"), "--hardware", "sm_120")
    assert code == 1 and entries_of(out) == (["fp8-index-keys", "two-batch-overlap"], [])
    code, out = scan(
        tmp_path,
        "serve.sh",
        TBO_PD.replace("nvidia/DeepSeek-V4-Flash-NVFP4", "meta-llama/Llama-3"),
        "--hardware",
        "sm_120",
    )
    assert (code, entries_of(out)) == (0, ([], []))


def test_the_last_use_of_a_flag_wins_as_in_argparse(tmp_path: Path) -> None:
    hidden = TBO_PD.replace("--model-path", "--model-path meta-llama/Llama-3 --model-path")
    code, out = scan(tmp_path, "serve.sh", hidden, "--hardware", "sm_120")
    assert code == 1 and entries_of(out) == (["fp8-index-keys", "two-batch-overlap"], [])
    code, out = scan(
        tmp_path,
        "serve.sh",
        hidden.replace("--model-path", "--model", 1).replace("meta-llama/Llama-3 --model", "--model"),
        "--hardware",
        "sm_120",
    )
    assert code == 1 and entries_of(out) == (["fp8-index-keys", "two-batch-overlap"], [])
    # the role too: decode then null is a single server, outside the PD scope of two-batch-overlap
    single = TBO_PD.replace("decode", "decode --disaggregation-mode null")
    code, out = scan(tmp_path, "serve.sh", single, "--hardware", "sm_120")
    assert code == 1 and entries_of(out) == (["fp8-index-keys"], [])
    # a trailing comment is not an argument
    commented = TBO_PD.replace("\n", " # was --model-path meta-llama/Llama-3\n")
    code, out = scan(tmp_path, "serve.sh", commented, "--hardware", "sm_120")
    assert code == 1 and entries_of(out) == (["fp8-index-keys", "two-batch-overlap"], [])


def test_flag_values_are_read_as_the_shell_reads_them(tmp_path: Path) -> None:
    m = "nvidia/DeepSeek-V4-Flash-NVFP4"
    for model, role in (
        (f'--model-path="{m}"', "--disaggregation-mode=decode"),
        (f"--model-path='{m}'", "--disaggregation-mode 'decode'"),
        (f'--model-path "{m}"', '--disaggregation-mode="decode"'),
        (f"--model={m}", "--disaggregation-mode \\\n  decode"),
    ):
        text = f"python -m sglang.launch_server {model} {role} --enable-two-batch-overlap --disable-overlap-schedule\n"
        code, out = scan(tmp_path, "serve.sh", text, "--hardware", "sm_120")
        assert code == 1 and entries_of(out) == (["fp8-index-keys", "two-batch-overlap"], []), (model, role)


def test_last_value_reads_every_spelling_of_a_flag() -> None:
    from patchtool.sglang.arguments import Value, last_value

    def read(text: str) -> tuple[str, bool] | None:
        v = last_value(text, "--model-path", "--model")
        assert v is None or isinstance(v, Value)
        return None if v is None else (v.text, v.literal)

    assert read("--model-path a/b --tp 4") == ("a/b", True)
    assert read('--model-path="a/b"') == ("a/b", True)
    assert read('["--model-path", "a/b", "--tp-size", "4"]') == ("a/b", True)
    assert read('{"args": ["--model-path","a/b"]}') == ("a/b", True)
    assert read("  - --model-path\n  - a/b\n") == ("a/b", True)
    assert read("model_path: a/b  # the checkpoint\n") == ("a/b", True)
    assert read('model-path = "a/b"\n') == ("a/b", True)
    assert read("--model-path a/b --model c/d") == ("c/d", True)
    assert read("--model-path a/b \\\n  --tp 4 # --model-path c/d\n") == ("a/b", True)
    assert read("--model-path $M") == ("$M", False)
    assert read("--model-path ${M:-a/b}") == ("${M:-a/b}", False)
    assert read("--model-path $(cat /etc/model) --tp 4") == ("$(cat /etc/model)", False)
    assert read("--model-path `cat /etc/model`") == ("`cat /etc/model`", False)
    assert read("--model-path '$M'") == ("'$M'", False)  # literal to the shell; unknown is the safe side
    assert read('--model-path "unclosed') == ('"unclosed', False)
    assert read("--model-path --tp 4") is None  # argparse would not take an option as the value
    assert read("--model-path a/b&") == ("a/b", True)
    assert read("--tp 4 # --model-path c/d") is None
    assert read('{"model_path": "a/b"}') == ("a/b", True)


# -- values are validated in ASCII: \d and \w take any Unicode digit or letter ----------------------


def test_hardware_with_non_ascii_digits_is_a_usage_error(tmp_path: Path) -> None:
    for arch in ("sm_\u0661\u0662\u0660", "sm_\uff11\uff12\uff10"):  # Arabic-Indic, fullwidth
        code, out = scan(tmp_path, "decode.sh", DSV4_PD, "--hardware", arch)
        assert code == 2 and out["status"] == "usage-error", arch
        assert out["errors"][0]["message"] == f"--hardware: {arch!r} is not a CUDA architecture (e.g. 'sm_120')"
    line = (REPO / "retread.toml").read_text().splitlines().index('modes = ["pd"]') + 1
    assert broken(
        '[rejected.scope]\nmodels = ["*DeepSeek-V4*"]\nhardware = ["sm_\u0661\u0662\u0660"]\nmodes = ["pd"]\n'
    ) == [
        f"retread.toml:{line - 1}: entry index-topk-1024: rejected[0].scope.hardware: item 0: "
        "'sm_\u0661\u0662\u0660' is not a CUDA architecture (e.g. 'sm_120')"
    ]


def test_an_evidence_date_with_non_ascii_digits_is_refused() -> None:
    bad = "\u0662\u0660\u0662\u0666-01"
    entry = {
        "id": "x",
        "title": "t",
        "tried": "t",
        "verdict": "rejected",
        "reason": "r",
        "revisit": "r",
        "evidence": [{"metric": "m", "change": "worse", "source": "s", "date": bad}],
        "unguarded": "an operational rule",
    }
    with pytest.raises(InvalidInput) as exc:
        reg.Registry.from_dict({"schema": 1, "rejected": [entry]}, file="r.toml")
    assert [p.render() for p in exc.value.problems] == [
        f"r.toml: entry x: rejected[0].evidence[0].date: {bad!r} is not a date (YYYY-MM or YYYY-MM-DD)"
    ]


def test_a_rejected_value_is_read_through_shell_quoting(tmp_path: Path) -> None:
    decode = DSV4_PD.replace("--tp-size 4", "--tp-size 4 --enable-deepseek-v4-bf16-indexer --disable-overlap-schedule")
    assert scan(tmp_path, "decode.sh", decode, "--hardware", "sm_120")[0] == 0
    for ep in ("--ep-size 8", '--ep-size="8"', "--ep-size='8'", '--ep-size "8"'):
        code, out = scan(tmp_path, "decode.sh", decode.replace("--port", f"{ep} --port"), "--hardware", "sm_120")
        assert code == 1 and [(f["entry"], f["text"]) for f in out["data"]["findings"]] == [
            ("expert-parallel-ep4", ep)
        ], ep


def test_a_launch_file_that_is_not_utf8_is_still_scanned(tmp_path: Path) -> None:
    """A Latin-1 comment beside a launch's (ASCII) flags does not hide the file: it is scanned as
    its UTF-8 twin is (found by an attack: it was skipped, "no rejected knobs found")."""
    text = "# caf\xe9 cluster\n" + DSV4_PD
    want = scan(tmp_path, "utf8.sh", text, "--hardware", "sm_120")
    path = tmp_path / "latin1.sh"
    path.write_bytes(text.encode("latin-1"))
    res = in_process(["retread", "scan", str(path), "--hardware", "sm_120", "--json"], cwd=REPO)
    got = json.loads(res.stdout)
    assert res.returncode == want[0] == 1
    assert (
        [(f["line"], f["entry"]) for f in got["data"]["findings"]]
        == [(f["line"], f["entry"]) for f in want[1]["data"]["findings"]]
        != []
    )


def test_a_shortened_flag_argparse_would_take_makes_the_scope_unknown(tmp_path: Path) -> None:
    """argparse takes a unique prefix of a long option (`--model-pa`, `--disaggregation-mo`):
    patchtool cannot know the prefix is unique, so the launch's model or role is unknown and the
    entry is a note, never silently out of scope (found by an attack: a later `--model-pa` naming
    DeepSeek-V4 hid behind an earlier `--model-path meta-llama/...`)."""
    hidden = DSV4_PD.replace(
        "--model-path nvidia/DeepSeek-V4-Flash-NVFP4",
        "--model-path meta-llama/Llama-3 --model-pa nvidia/DeepSeek-V4-Flash-NVFP4",
    )
    code, out = scan(tmp_path, "decode.sh", hidden, "--hardware", "sm_120")
    assert code == 0 and out["data"]["findings"] == []
    unknown = {n["entry"]: n["unknown"] for n in out["data"]["notes"]}
    assert "fp8-index-keys" in unknown and "--model-pa" in " ".join(unknown["fp8-index-keys"]), unknown
    role = DSV4_PD.replace("--disaggregation-mode decode", "--disaggregation-mo decode")
    _, plain = scan(tmp_path, "decode.sh", DSV4_PD, "--hardware", "sm_120")
    _, out = scan(tmp_path, "decode.sh", role, "--hardware", "sm_120")
    seen = {n["entry"] for n in out["data"]["notes"] + out["data"]["findings"]}
    assert {f["entry"] for f in plain["data"]["findings"]} <= seen, out["data"]
    two_batch = DSV4_PD + "  --enable-two-batch-overlap\n"
    _, plain = scan(tmp_path, "decode.sh", two_batch, "--hardware", "sm_120")
    _, out = scan(
        tmp_path, "decode.sh", two_batch.replace("--disaggregation-mode", "--disaggregation-mo"), "--hardware", "sm_120"
    )
    assert "two-batch-overlap" in {f["entry"] for f in plain["data"]["findings"]}
    assert "two-batch-overlap" in {n["entry"] for n in out["data"]["notes"] + out["data"]["findings"]}, out["data"]
