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

REPO = Path(__file__).resolve().parent.parent

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
    from patchtool.registry.scope import LaunchFacts, Mode, Role, Scope, Verdict

    scope = Scope(models=("*DeepSeek-V4*",), hardware=("sm_120",), modes=(Mode.PD,), roles=(Role.DECODE,))
    dsv4 = "nvidia/DeepSeek-V4-Flash-NVFP4"

    def fit(**facts: Any) -> tuple[Verdict, tuple[str, ...]]:
        found = scope.fit(LaunchFacts(**{"model": dsv4, "hardware": "sm_120", "mode": Mode.PD, **facts}))
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
    assert scope.fit(LaunchFacts()).why == (
        "no model path (give --model)",
        "hardware not given (give --hardware)",
        "serving mode (PD or single server) not known",
        "PD role not known",
    )
    # a single server does both roles
    decode_only = Scope(roles=(Role.DECODE,))
    assert decode_only.fit(LaunchFacts(mode=Mode.SINGLE)).verdict is Verdict.IN
    assert scope.describe() == "model *DeepSeek-V4* on sm_120, PD, decode only"
