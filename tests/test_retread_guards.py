"""How the registry's guards read text: argument lists in YAML and JSON, Kubernetes env pairs,
assignment forms in code, and a deployment file launch by launch with the role of each.

Each test builds the small registry it needs, so it pins the matching rules, not retread.toml.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from patchtool.errors import InvalidInput
from patchtool.registry import entries as reg
from patchtool.sglang import deploy

DEPLOY = Path(__file__).parent / "data" / "deploy"
MMA = "python/sglang/kernels/ops/attention/flash_mla_sm120_mma.py"


def registry(*knobs: dict[str, Any], ident: str = "x") -> reg.Registry:
    entry = {
        "id": ident,
        "title": "t",
        "tried": "t",
        "verdict": "rejected",
        "reason": "r",
        "revisit": "r",
        "evidence": [{"metric": "m", "change": "worse", "source": "s"}],
        "knobs": list(knobs),
    }
    return reg.Registry.from_dict({"schema": 1, "rejected": [entry]}, file="r.toml")


def found(r: reg.Registry, text: str, name: str = "deploy.yaml") -> list[tuple[int, str]]:
    return [(f.line, f.text) for f in deploy.scan_text(r, text, file=name, name=name).findings]


def in_code(r: reg.Registry, *lines: str, target: str = MMA) -> list[tuple[int, str]]:
    numbered = list(enumerate(lines, 1))
    return [(f.line, f.text) for f in reg.scan_lines(r, numbered, file="p.patch", target=target)]


EP = registry({"type": "flag", "name": "--ep-size", "aliases": ["--ep"], "values": "[2-9]|[1-9][0-9]+"})
TBO = registry(
    {"type": "flag", "name": "--enable-two-batch-overlap"},
    {"type": "flag", "name": "--tbo-token-distribution-threshold"},
)
STREAMS = registry(
    {"type": "env", "name": "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP", "values": "1|true", "roles": ["decode"]}
)
WARPS = registry({"type": "config", "name": "num_warps", "values": "8", "files": ["*flash_mla_sm120_mma*"]})
OVERLAP = registry({"type": "flag", "name": "--disable-overlap-schedule", "missing": True})


# -- argument lists -----------------------------------------------------------------------------


def test_yaml_argument_list_with_the_value_on_the_next_item() -> None:
    text = 'args:\n  - --tp-size\n  - "4"\n  - --ep-size\n  - "8"\n  - --port\n'
    assert found(EP, text) == [(4, '--ep-size "8"')]  # the shown text holds the whole quoted word
    assert found(EP, "args:\n  - --ep-size\n  - '1'\n") == []
    assert found(EP, "args:\n  - --ep\n  - 2\n")[0][0] == 2


def test_yaml_flag_items_without_values() -> None:
    text = 'args:\n  - --enable-two-batch-overlap\n  - --tbo-token-distribution-threshold\n  - "8"\n'
    assert [n for n, _ in found(TBO, text)] == [2, 3]


def test_json_array_one_item_per_line() -> None:
    text = '{\n  "args": [\n    "--ep-size",\n    "4",\n    "--port",\n    "30001"\n  ]\n}\n'
    assert [n for n, _ in found(EP, text, "args.json")] == [3]
    assert found(EP, text.replace('"4"', '"1"'), "args.json") == []


@pytest.mark.parametrize(
    "line",
    [
        'ARGS = ["--ep-size", "4"]',
        'ARGS = ["--ep-size" , "4"]',
        "--ep-size=4",
        '"--ep-size=4"',
        "- --ep-size 4",
        "--ep 16",
    ],
)
def test_flag_forms_on_one_line(line: str) -> None:
    assert [n for n, _ in found(EP, line)] == [1]


# -- env entries --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        'env:\n  - name: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP\n    value: "1"\n',
        'env:\n  - {name: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP, value: "1"}\n',
        'env:\n  - value: "1"\n    name: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP\n',
        '{"env": [{"name": "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP", "value": "1"}]}\n',
        '{"env": [\n  {\n    "name": "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP",\n    "value": "true"\n  }\n]}\n',
        'environment:\n  SGLANG_OPT_USE_MULTI_STREAM_OVERLAP: "1"\n',
        "environment:\n  - SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1\n",
    ],
)
def test_env_entries_in_manifests(text: str) -> None:
    assert len(found(STREAMS, text, "decode.yaml")) == 1


@pytest.mark.parametrize(
    "text",
    [
        'env:\n  - name: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP\n    value: "0"\n',
        "env:\n  - name: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP\n    valueFrom: {configMapKeyRef: {name: c, key: k}}\n",
        'env:\n  - name: OTHER\n    value: "1"\n',
    ],
)
def test_env_entries_that_do_not_set_it(text: str) -> None:
    assert found(STREAMS, text, "decode.yaml") == []


# -- assignment forms in code -------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "MMA_NUM_WARPS = 8",
        "_NUM_WARPS = 8  # was 4",
        "NUM_WARPS: tl.constexpr = 8",
        "        num_warps=8,",
        "        num_warps = 8,",
        '    launch_kwargs = {"num_warps": 8, "num_stages": 2}',
        "    cfg.num_warps = 8",
        "BLOCK_T, NUM_WARPS, NUM_STAGES = 16, 8, 2",
        '        triton.Config({"BLOCK_T": 16}, num_warps=8, num_stages=2),',
        "    num_warps = 8 if batch > 64 else 4",
        "    num_warps: int = 8,",
        "    MMA_NUM_WARPS = tl.constexpr(8)",
    ],
)
def test_assignment_forms_in_the_guarded_kernel(line: str) -> None:
    assert [n for n, _ in in_code(WARPS, line)] == [1]


@pytest.mark.parametrize(
    "line",
    [
        "MMA_NUM_WARPS = 4",
        "        num_warps=MMA_NUM_WARPS,",
        "    if num_warps == 8:",
        "    assert num_warps != 8",
        "    num_warps_per_cta = 8",
        "    # num_warps=8 was slower everywhere",
        "BLOCK_T, NUM_WARPS, NUM_STAGES = 16, 4, 8",
        "BLOCK_T, NUM_WARPS == 16, 8",
    ],
)
def test_what_is_not_an_assignment_of_8(line: str) -> None:
    assert in_code(WARPS, line) == []


def test_the_guard_stays_in_its_files() -> None:
    upstream_triton = "python/sglang/kernels/ops/attention/flash_mla_sm120_triton.py"
    assert (
        in_code(WARPS, '        triton.Config({"BLOCK_T": 16}, num_warps=8, num_stages=2),', target=upstream_triton)
        == []
    )


def test_a_value_on_the_next_line_only_when_it_is_the_next_line() -> None:
    lines = [(10, '    "--ep-size",'), (11, '    "4",'), (20, '    "--ep",'), (30, '    "4",')]
    findings = reg.scan_lines(EP, lines, file="p.patch", target="test/launch.py")
    assert [f.line for f in findings] == [10]


# -- deployment files, launch by launch ---------------------------------------------------------


def test_each_launch_has_its_own_role_and_its_own_flags() -> None:
    text = (DEPLOY / "docker-compose.yaml").read_text()
    plan = deploy.layout(text, "docker-compose.yaml")
    assert [sorted(b.roles) for b in plan.launches] == [["prefill"], ["decode"]]
    assert plan.shared.roles == frozenset()
    # the decode service drops --disable-overlap-schedule; the prefill service still has it
    decode_only = text.replace("      - --disable-overlap-schedule\n", "", 1)
    assert [n for n, _ in found(OVERLAP, decode_only, "docker-compose.yaml")] == [32]
    # multi-stream overlap on is fine on prefill, rejected on decode
    on_prefill = text.replace(
        "      SGLANG_SM120_FLASHMLA_BACKEND: flashinfer\n",
        '      SGLANG_SM120_FLASHMLA_BACKEND: flashinfer\n      SGLANG_OPT_USE_MULTI_STREAM_OVERLAP: "1"\n',
    )
    assert found(STREAMS, on_prefill, "docker-compose.yaml") == []
    on_decode = text.replace("SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0", "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1")
    assert [n for n, _ in found(STREAMS, on_decode, "docker-compose.yaml")] == [49]


def test_kubernetes_pod_specs_are_launches_of_their_own() -> None:
    text = (DEPLOY / "k8s-pd.yaml").read_text()
    plan = deploy.layout(text, "k8s-pd.yaml")
    assert [(b.launch, sorted(b.roles)) for b in plan.launches] == [(18, ["prefill"]), (58, ["decode"])]
    decode_only = text.replace(
        '          - --disable-overlap-schedule\n          - --port\n          - "30001"',
        '          - --port\n          - "30001"',
    )
    assert [n for n, _ in found(OVERLAP, decode_only, "k8s-pd.yaml")] == [58]


def test_an_argument_list_without_a_launch_command_is_a_launch() -> None:
    text = '{"args": ["--model-path", "m", "--disaggregation-mode", "decode"]}\n'
    assert [n for n, _ in found(OVERLAP, text, "args.json")] == [1]
    assert found(OVERLAP, text.replace('"decode"]', '"decode", "--disable-overlap-schedule"]'), "args.json") == []


def test_a_script_with_two_launches() -> None:
    text = (
        "export SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0\n"
        "python3 -m sglang.launch_server --disaggregation-mode prefill \\\n  --disable-overlap-schedule &\n"
        "python3 -m sglang.launch_server --disaggregation-mode decode \\\n  --port 30001 &\n"
    )
    plan = deploy.layout(text, "pd.sh")
    assert [(b.launch, sorted(b.roles), b.lines) for b in plan.launches] == [
        (2, ["prefill"], (2, 3)),
        (4, ["decode"], (4, 5)),
    ]
    assert [n for n, _ in found(OVERLAP, text, "pd.sh")] == [4]
    shared = (
        "COMMON='--max-queued-requests 32 --disable-overlap-schedule'\n"
        "python3 -m sglang.launch_server --disaggregation-mode prefill $COMMON &\n"
        "python3 -m sglang.launch_server --disaggregation-mode decode $COMMON &\n"
    )
    assert found(OVERLAP, shared, "pd.sh") == []  # set once for both launches
    flush = (
        "python3 -m sglang.launch_server --disaggregation-mode prefill \\\n--disable-overlap-schedule &\n"
        "python3 -m sglang.launch_server --disaggregation-mode decode \\\n--port 30001 &\n"
    )
    assert [n for n, _ in found(OVERLAP, flush, "pd.sh")] == [3]  # a continued line belongs to its command


def test_a_commented_out_flag_is_not_a_use() -> None:
    text = "python3 -m sglang.launch_server \\\n  --tp-size 4\n# --disable-overlap-schedule\n"
    assert [n for n, _ in found(OVERLAP, text, "decode.sh")] == [1]
    assert found(TBO, "# we tried --enable-two-batch-overlap; see the registry\n", "decode.sh") == []


# -- roles --------------------------------------------------------------------------------------

RESTART = registry(
    {
        "type": "pattern",
        "name": "restarts itself",
        "regex": r"^\s*Restart\s*=\s*(?:[^\sn]\S*|n(?:$|[^o]\S*)|no\s*\S\S*)",
        "roles": ["decode"],
        "strict_roles": True,
    }
)


def test_strict_roles_only_where_the_role_is_known() -> None:
    unit = "[Service]\nExecStart=/usr/bin/router --pd-disaggregation\nRestart=always\n"
    assert found(RESTART, unit, "sglang-router.service") == []
    assert found(RESTART, unit, "sglang-decode.service") == [(3, "Restart=always")]
    assert found(RESTART, unit, "sglang-prefill.service") == []
    lenient = registry({"type": "pattern", "name": "p", "regex": r"^Restart=\S+", "roles": ["decode"]})
    assert found(lenient, unit, "sglang-router.service") == [(3, "Restart=always")]


def test_strict_roles_needs_roles() -> None:
    with pytest.raises(InvalidInput) as exc:
        registry({"type": "pattern", "name": "p", "regex": "x", "strict_roles": True})
    assert [p.render() for p in exc.value.problems] == [
        "r.toml: entry x: rejected[0].knobs[0].strict_roles: strict_roles needs the 'roles' it is strict about"
    ]


# -- entries the guard cannot see ---------------------------------------------------------------


def test_an_entry_without_knobs_must_say_the_guard_cannot_see_it() -> None:
    with pytest.raises(InvalidInput) as exc:
        registry()
    assert [p.render() for p in exc.value.problems] == [
        "r.toml: entry x: rejected[0].knobs: no knob: neither `check` nor `retread scan` could ever see this "
        "idea come back (hint: add [[rejected.knobs]] with what would re-introduce it, or unguarded = "
        '"why no knob can" to say the guard cannot see it)'
    ]
    entry = {
        "id": "x",
        "title": "t",
        "tried": "t",
        "verdict": "rejected",
        "reason": "r",
        "revisit": "r",
        "evidence": [{"metric": "m", "change": "worse", "source": "s"}],
        "unguarded": "an operational rule",
    }
    parsed = reg.Registry.from_dict({"schema": 1, "rejected": [entry]}, file="r.toml").entries[0]
    assert parsed.knobs == () and parsed.to_dict()["unguarded"] == "an operational rule"
