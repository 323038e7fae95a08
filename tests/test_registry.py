"""The do-not-retread registry: every entry parses with evidence, its guards catch its knobs in a
deployment file and in a patch, revisit conditions evaluate, bad input names entry and key."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from patchtool.errors import InvalidInput
from patchtool.registry import entries as reg
from patchtool.sglang import deploy
from patchtool.sglang.launch import LaunchFacts

REPO = Path(__file__).resolve().parent.parent
DEPLOY = Path(__file__).parent / "data" / "deploy"
REGISTRY = reg.parse_text((REPO / "retread.toml").read_text(), file="retread.toml")


# the production deployment: what its files do not say (its env files' model, the hardware)
PRODUCTION = LaunchFacts(model="nvidia/DeepSeek-V4-Flash-NVFP4", hardware="sm_120")


def scanned(name: str, text: str | None = None, assumed: LaunchFacts = PRODUCTION) -> deploy.Scanned:
    content = (DEPLOY / name).read_text() if text is None else text
    return deploy.scan_text(REGISTRY, content, file=name, name=name, assumed=assumed)


def scan(name: str, text: str | None = None) -> list[reg.Finding]:
    return list(scanned(name, text).findings)


def edited(name: str, old: str, new: str) -> str:
    text = (DEPLOY / name).read_text()
    assert old in text, (old, name)
    return text.replace(old, new, 1)


PORT = "  --host 0.0.0.0 --port"

# entry -> (deployment file, text to replace, replacement): a realistic way a team brings it back
DEPLOYMENT = {
    "index-topk-1024": ("decode.sh", PORT, "  --json-model-override-args '{\"index_topk\": 1024}' \\\n" + PORT),
    "mxfp4-base-checkpoint": ("prefill.sh", "nvidia/DeepSeek-V4-Flash-NVFP4", "deepseek-ai/DeepSeek-V4-Flash"),
    "overlap-schedule": ("decode.sh", "  --disable-overlap-schedule \\\n", ""),
    "two-batch-overlap": ("decode.sh", PORT, "  --enable-two-batch-overlap \\\n" + PORT),
    "expert-parallel-ep4": ("decode.sh", PORT, "  --ep-size 4 \\\n" + PORT),
    "mscclpp": ("prefill.sh", PORT, "  --enable-mscclpp \\\n" + PORT),
    "single-batch-overlap": ("decode.sh", PORT, "  --enable-single-batch-overlap \\\n" + PORT),
    "allreduce-fusion": ("decode.sh", PORT, "  --flashinfer-allreduce-fusion-backend trtllm \\\n" + PORT),
    "torch-compile": ("decode.env", "NCCL_DEBUG=WARN", "NCCL_DEBUG=WARN\nSGLANG_ENABLE_TORCH_COMPILE=1"),
    "mtp-high-concurrency": (
        "decode.sh",
        PORT,
        "  --speculative-algorithm NEXTN --speculative-num-steps 3 \\\n" + PORT,
    ),
    "nccl-tree": ("decode.env", "NCCL_DEBUG=WARN", "NCCL_ALGO=Tree"),
    "hicache-off-corruption-fix": ("prefill.sh", "  --enable-hierarchical-cache \\\n", ""),
    "multi-stream-overlap-decode": (
        "decode.env",
        "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0",
        "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1",
    ),
    "dp-attention-indexer-capture": (
        "decode.sh",
        PORT,
        "  --enable-dp-attention --dp-size 4 --enable-return-indexer-topk \\\n" + PORT,
    ),
    "hicache-size-v4": ("prefill.sh", "  --hicache-ratio 2.0 \\\n", "  --hicache-size 20 \\\n"),
    "persistent-megakernel": ("decode.sh", PORT, "  --enable-nvidia-megakernel \\\n" + PORT),
    "fp8-index-keys": ("prefill.sh", "  --enable-deepseek-v4-bf16-indexer \\\n", ""),
    "mma-target-ctas-512-default": (
        "decode.env",
        "NCCL_DEBUG=WARN",
        "NCCL_DEBUG=WARN\nSGLANG_SM120_MMA_TARGET_CTAS=512",
    ),
    "restart-decode-alone": ("sglang-decode.service", "Restart=no", "Restart=on-failure"),
}

# entry -> (upstream path, a line a patch might add): code-level re-introductions
PATCH = {
    "index-topk-1024": ("python/sglang/srt/configs/deepseek_v4.py", "    index_topk: int = 1024"),
    "mxfp4-base-checkpoint": ("benchmark/dsv4/run.py", 'MODEL = "deepseek-ai/DeepSeek-V4-Flash"'),
    "overlap-schedule": (
        "python/sglang/srt/arg_groups/model_hook.py",
        "    server_args.disable_overlap_schedule = False",
    ),
    "attn-num-warps-8": ("python/sglang/kernels/ops/attention/flash_mla_sm120_mma.py", "        num_warps=8,"),
    "attn-num-stages-3": ("python/sglang/kernels/ops/attention/flash_mla_sm120_mma.py", "        num_stages=3,"),
    "two-batch-overlap": ("test/srt/test_dsv4_pd.py", '    "--enable-two-batch-overlap",'),
    "expert-parallel-ep4": ("test/srt/test_dsv4_pd.py", '    "--ep-size", "4",'),
    "mscclpp": ("python/sglang/srt/arg_groups/model_hook.py", "    server_args.enable_mscclpp = True"),
    "single-batch-overlap": (
        "python/sglang/srt/arg_groups/model_hook.py",
        "    cfg.enable_single_batch_overlap = True",
    ),
    "allreduce-fusion": (
        "python/sglang/srt/arg_groups/model_hook.py",
        "    server_args.enable_flashinfer_allreduce_fusion = True",
    ),
    "torch-compile": ("python/sglang/srt/environ.py", "    SGLANG_ENABLE_TORCH_COMPILE = EnvBool(True)"),
    "persistent-megakernel": (
        "python/sglang/kernels/ops/attention/dsv4_decode.py",
        "def persistent_megakernel_decode(q, kv):",
    ),
    "mtp-high-concurrency": ("test/srt/test_dsv4_pd.py", '    "--speculative-algorithm", "NEXTN",'),
    "nccl-tree": ("python/sglang/srt/arg_groups/attention_hook.py", '    os.environ["NCCL_ALGO"] = "Tree"'),
    "register-pressure-rewrite": ("python/sglang/kernels/ops/attention/flash_mla_sm120_mma.py", "    maxnreg=128,"),
    "multi-stream-overlap-decode": (
        "python/sglang/srt/environ.py",
        "    SGLANG_OPT_USE_MULTI_STREAM_OVERLAP = EnvBool(True)",
    ),
    "dp-attention-indexer-capture": ("test/srt/test_capture.py", '    "--enable-return-indexer-topk",'),
    "hicache-size-v4": ("test/srt/test_dsv4_pd.py", '    "--hicache-size", "20",'),
    "nonfused-bf16-index-store": (
        "python/sglang/srt/layers/attention/dsv4/compressor_v2.py",
        "            store_bf16_index_k_torch(kv_cache, out_loc, k, page_size)",
    ),
    "mma-target-ctas-512-default": ("python/sglang/srt/environ.py", "    SGLANG_SM120_MMA_TARGET_CTAS = EnvInt(512)"),
}
# knobs only a deployment sets (a flag that must stay on the launch line, how a server restarts)
DEPLOYMENT_ONLY = {"hicache-off-corruption-fix", "fp8-index-keys", "restart-decode-alone"}
# knobs only code sets (kernel launch parameters and kernel structure)
CODE_ONLY = {"attn-num-warps-8", "attn-num-stages-3", "register-pressure-rewrite", "nonfused-bf16-index-store"}
# lines of investigation, not settings: no knob, `unguarded` says so
UNGUARDED = {"routed-scaling-recall-suspect", "bf16-corruption-excluded-causes"}


def test_every_rejected_idea_is_recorded_with_reason_evidence_and_knobs() -> None:
    ids = {e.id for e in REGISTRY.entries}
    assert ids == set(PATCH) | DEPLOYMENT_ONLY | UNGUARDED
    assert set(DEPLOYMENT) == ids - CODE_ONLY - UNGUARDED
    for e in REGISTRY.entries:
        assert e.reason and e.tried and e.revisit and e.evidence, e.id
        assert bool(e.knobs) == (e.id not in UNGUARDED) and (e.unguarded or e.knobs), e.id
        assert all(m.hardware and m.model and m.upstream and m.source for m in e.evidence), e.id


@pytest.mark.parametrize("name", sorted(p.name for p in DEPLOY.iterdir()))
def test_production_deployment_files_are_clean(name: str) -> None:
    assert scanned(name) == deploy.Scanned()


# entries whose evidence holds under a condition no launch states: a use in scope is a note
NOTE_ONLY = {"mtp-high-concurrency"}


@pytest.mark.parametrize("entry", sorted(DEPLOYMENT))
def test_guard_catches_the_entry_in_a_deployment_file(entry: str) -> None:
    name, old, new = DEPLOYMENT[entry]
    found = scanned(name, edited(name, old, new))
    if entry in NOTE_ONLY:
        assert found.findings == () and [n.finding.entry for n in found.notes] == [entry]
        return
    findings = found.findings
    assert {f.entry for f in findings} == {entry} and found.notes == ()
    f = findings[0]
    assert f.file == name and f.line >= 1 and f.reason == REGISTRY.get(entry).reason
    assert f"re-introduces rejected idea {entry!r}" in f.render()


@pytest.mark.parametrize("entry", sorted(PATCH))
def test_guard_catches_the_entry_in_a_patch(entry: str) -> None:
    target, line = PATCH[entry]
    findings = reg.scan_lines(REGISTRY, [(42, line)], file="patches/0009-x.patch", patch="x", target=target)
    assert [f.entry for f in findings] == [entry]
    assert findings[0].line == 42 and findings[0].target == target


K8S_DECODE_PORT = '          - --port\n          - "30001"\n'
COMPOSE_DECODE_ENV = "      - SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=0\n"

# (entry, file, text to replace, replacement): Kubernetes and compose forms of bringing an idea back
MANIFESTS = [
    (
        "expert-parallel-ep4",
        "k8s-pd.yaml",
        K8S_DECODE_PORT,
        '          - --ep-size\n          - "8"\n' + K8S_DECODE_PORT,
    ),
    ("two-batch-overlap", "k8s-pd.yaml", K8S_DECODE_PORT, "          - --enable-two-batch-overlap\n" + K8S_DECODE_PORT),
    ("multi-stream-overlap-decode", "k8s-pd.yaml", 'value: "0"', 'value: "1"'),
    ("nccl-tree", "k8s-pd.yaml", "{name: NCCL_DEBUG, value: WARN}", "{name: NCCL_ALGO, value: Tree}"),
    ("overlap-schedule", "k8s-pd.yaml", "          - --disable-overlap-schedule\n" + K8S_DECODE_PORT, K8S_DECODE_PORT),
    ("fp8-index-keys", "k8s-pd.yaml", "          - --enable-deepseek-v4-bf16-indexer\n", ""),
    (
        "restart-decode-alone",
        "docker-compose.yaml",
        COMPOSE_DECODE_ENV,
        COMPOSE_DECODE_ENV + "    restart: unless-stopped\n",
    ),
    (
        "mma-target-ctas-512-default",
        "docker-compose.yaml",
        COMPOSE_DECODE_ENV,
        COMPOSE_DECODE_ENV + "      - SGLANG_SM120_MMA_TARGET_CTAS=512\n",
    ),
    (
        "mtp-high-concurrency",
        "docker-compose.yaml",
        '      - "30001"\n',
        '      - "30001"\n      - --speculative-algorithm\n      - NEXTN\n',
    ),
    ("hicache-size-v4", "docker-compose.yaml", "--hicache-ratio 2.0", "--hicache-size 20"),
    (
        "restart-decode-alone",
        "restart-pd.sh",
        "systemctl restart sglang-prefill.service sglang-decode.service",
        "systemctl restart sglang-decode.service",
    ),
    (
        "restart-decode-alone",
        "restart-pd.sh",
        "deployment/sglang-prefill deployment/sglang-decode",
        "deployment/sglang-decode",
    ),
]


@pytest.mark.parametrize(("entry", "name", "old", "new"), MANIFESTS)
def test_guard_catches_the_entry_in_a_manifest(entry: str, name: str, old: str, new: str) -> None:
    found = scanned(name, edited(name, old, new))
    uses = found.notes if entry in NOTE_ONLY else found.findings
    assert {u.entry if isinstance(u, reg.Finding) else u.finding.entry for u in uses} == {entry}, found


def test_what_is_fine_on_prefill_or_the_router_is_not_flagged_in_a_manifest() -> None:
    prefill_streams = edited(
        "docker-compose.yaml",
        "      SGLANG_SM120_FLASHMLA_BACKEND: flashinfer\n",
        "      SGLANG_SM120_FLASHMLA_BACKEND: flashinfer\n"
        '      SGLANG_OPT_USE_MULTI_STREAM_OVERLAP: "1"\n      SGLANG_SM120_MMA_TARGET_CTAS: "512"\n',
    )
    assert scan("docker-compose.yaml", prefill_streams) == []
    prefill_restarts = edited(
        "docker-compose.yaml", "      --port 30000\n", "      --port 30000\n    restart: always\n"
    )
    assert scan("docker-compose.yaml", prefill_restarts) == []
    text = (DEPLOY / "docker-compose.yaml").read_text()
    assert "    restart: unless-stopped\n" in text.split("  router:")[1]  # the router restarts on its own


def test_what_the_evidence_does_not_cover_is_not_flagged() -> None:
    # MTP is NEXTN/EAGLE; other speculative algorithms were not what the report rejected
    assert scan("decode.sh", edited("decode.sh", PORT, "  --speculative-algorithm NGRAM \\\n" + PORT)) == []
    # num_warps=8 was measured on the MMA kernel; upstream's Triton backend autotunes with it
    triton = "python/sglang/kernels/ops/attention/flash_mla_sm120_triton.py"
    line = '        triton.Config({"BLOCK_T": 16}, num_warps=8, num_stages=2),'
    assert reg.scan_lines(REGISTRY, [(1, line)], file="p.patch", target=triton) == []
    # only 512 hung; other wave-fill targets were not measured
    assert scan("decode.env", edited("decode.env", "NCCL_DEBUG=WARN", "SGLANG_SM120_MMA_TARGET_CTAS=0")) == []


def test_nccl_tree_flags_only_what_the_field_tried() -> None:
    # sglang sets NCCL_ALGO=allreduce:tree itself under these; the field never tried them
    for flag in ("--enable-deterministic-inference", "--rl-on-policy-target slime"):
        assert scanned("decode.sh", edited("decode.sh", PORT, f"  {flag} \\\n" + PORT)) == deploy.Scanned(), flag
    assert "the guard does not flag them" in (REGISTRY.get("nccl-tree").unguarded or "")
    assert [f.entry for f in scan("decode.env", edited("decode.env", "NCCL_DEBUG=WARN", "NCCL_ALGO=Tree"))] == [
        "nccl-tree"
    ]


def test_mtp_is_a_note_at_any_concurrency_not_a_finding() -> None:
    for algorithm in ("NEXTN", "EAGLE", "EAGLE3"):
        text = edited("decode.sh", PORT, f"  --speculative-algorithm {algorithm} --max-running-requests 4 \\\n" + PORT)
        found = scanned("decode.sh", text)
        assert found.findings == (), algorithm
        if algorithm == "EAGLE3":  # the evidence is NEXTN, which sglang resolves to EAGLE
            assert found.notes == ()
            continue
        (note,) = found.notes
        assert note.finding.entry == "mtp-high-concurrency"
        assert note.unknown == ("the evidence holds only at high concurrency, which a launch does not state",)


def test_multi_stream_overlap_is_only_rejected_on_decode() -> None:
    prefill = edited(
        "prefill.sh", "export SGLANG_SM120", "export SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1\nexport SGLANG_SM120"
    )
    assert scan("prefill.sh", prefill) == []


def test_systemd_unit_and_argument_list_are_scanned() -> None:
    unit = edited("sglang-decode.service", "--tp-size 4", "--tp-size 4 --ep-size 4")
    assert [f.entry for f in scan("sglang-decode.service", unit)] == ["expert-parallel-ep4"]
    unit = edited(
        "sglang-decode.service",
        'Environment="SGLANG_SM120_FLASHMLA_BACKEND=flashinfer"',
        'Environment="SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=true"',
    )
    assert [f.entry for f in scan("sglang-decode.service", unit)] == ["multi-stream-overlap-decode"]
    args = json.loads((DEPLOY / "launch_args.json").read_text())
    args["args"] += ["--ep-size", "4"]
    assert [f.entry for f in scan("launch_args.json", json.dumps(args, indent=2))] == ["expert-parallel-ep4"]


def test_prose_naming_a_flag_in_python_is_not_a_use() -> None:
    lines = [
        (1, '        "would run without it. Drop --enable-two-batch-overlap to serve this "'),
        (2, "        enable_two_batch_overlap=cfg.enable_two_batch_overlap,"),
        (3, "    ep_size = 1"),
    ]
    assert reg.scan_lines(REGISTRY, lines, file="patches/0005.patch", target="python/sglang/x.py") == []


def test_ep1_and_multistream_off_are_fine() -> None:
    assert scan("decode.sh", edited("decode.sh", PORT, "  --ep-size 1 \\\n" + PORT)) == []


# -- revisit --------------------------------------------------------------------------------


def entry(**changes: Any) -> reg.Rejection:
    base = {
        "id": "x",
        "title": "t",
        "tried": "t",
        "verdict": "rejected",
        "reason": "r",
        "revisit": "r",
        "evidence": [{"metric": "m", "change": "worse", "source": "s"}],
        "knobs": [{"type": "flag", "name": "--x"}],
    }
    base.update(changes)
    return reg.Registry.from_dict({"schema": 1, "rejected": [base]}, file="r.toml").entries[0]


def test_revisit_conditions_evaluate() -> None:
    e = entry(
        revisit_when=[
            {"version": ">=0.6", "why": "new major"},
            {"file": "a.py", "regex": "NotImplementedError", "appears": False, "why": "wired now"},
            {"file": "a.py", "regex": "def fast_path", "why": "fast path added"},
            {"flag": "--hicache-size", "change": "removed", "why": "flag gone"},
            {"flag": "--new-thing", "change": "added", "why": "flag added"},
            {"observed": "364 B spill stores", "source": "measured here: a compile", "why": "spills"},
        ]
    )
    fields = {"python/sglang/srt/arg_groups/fields/memory.py": b"    hicache_size: A[\n        int, 'x'] = 0\n"}
    old = reg.evaluate_all(
        reg.Registry(entries=(e,)),
        version=Version("0.5.23"),
        files={"a.py": b"raise NotImplementedError\n"},
        field_files=fields,
    )
    assert [r.holds for r in old] == [False, False, False, False, False, True]
    assert old[-1].detail == "measured: 364 B spill stores (source: measured here: a compile)"
    new = reg.evaluate_all(
        reg.Registry(entries=(e,)),
        version=Version("0.6.1"),
        files={"a.py": b"def fast_path(): ...\n"},
        field_files={"python/sglang/srt/arg_groups/fields/memory.py": b"    aliases=['--new-thing']\n"},
    )
    assert [r.holds for r in new] == [True, True, True, True, True, True]


# -- bad input ------------------------------------------------------------------------------


def data() -> dict[str, Any]:
    import tomllib

    return tomllib.loads((REPO / "retread.toml").read_text())


def errors(d: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidInput) as exc:
        reg.Registry.from_dict(d, file="retread.toml")
    return [p.render() for p in exc.value.problems]


def test_duplicate_ids() -> None:
    d = data()
    d["rejected"].append(copy.deepcopy(d["rejected"][0]))
    n = len(d["rejected"]) - 1
    assert errors(d) == [
        f"retread.toml: entry index-topk-1024: rejected[{n}].id: duplicate entry id "
        "'index-topk-1024' (also rejected[0]) (hint: every rejected idea needs its own id)"
    ]


def test_entry_without_reason_or_evidence() -> None:
    d = data()
    del d["rejected"][2]["reason"]
    del d["rejected"][3]["evidence"]
    found = errors(d)
    assert "retread.toml: entry overlap-schedule: rejected[2].reason: missing required key" in found
    assert any(
        e.startswith("retread.toml: entry attn-num-warps-8: rejected[3].evidence: missing required key") for e in found
    )


def test_guard_pattern_that_is_not_a_regex() -> None:
    d = data()
    d["rejected"][2]["knobs"][1]["regex"] = "disable_overlap_schedule\\s*=(False"
    assert any(
        e.startswith("retread.toml: entry overlap-schedule: rejected[2].knobs[1].regex: invalid regular expression")
        for e in errors(d)
    )
    d = data()
    d["rejected"][3]["knobs"][0]["regex"] = "num_warps"
    assert (
        "retread.toml: entry attn-num-warps-8: rejected[3].knobs[0].regex: only pattern guards take a 'regex'; "
        "a config guard matches by name" in errors(d)
    )
    d = data()
    d["rejected"][6]["knobs"][0]["values"] = "[2-9"
    assert any("rejected[6].knobs[0].values: invalid regular expression '[2-9'" in e for e in errors(d))


def test_unknown_keys_and_values() -> None:
    d = data()
    d["rejected"][0]["verdict"] = "nope"
    d["rejected"][0]["knobs"][0]["kind"] = "flag"
    found = errors(d)
    assert any("rejected[0].verdict: unknown value 'nope'" in e for e in found)
    assert any("rejected[0].knobs[0].kind: unknown key" in e for e in found)


def test_unknown_id_in_get() -> None:
    with pytest.raises(KeyError, match="no rejected idea 'nope'"):
        REGISTRY.get("nope")


# -- every reason and number carries its source ------------------------------------------------

SOURCES = ("field report 000", "field report 004", "FACTS.md", "measured here: tests/")
CITATION = re.compile(r"([\w/]+\.(?:py|cuh)):(\d+)(?:-(\d+))?")


def test_every_reason_and_measurement_names_its_source() -> None:
    for e in REGISTRY.entries:
        assert re.search(r"\((?:[^()]*; )?(?:field report 00[04]|FACTS\.md)", e.reason), e.id
        for m in e.evidence:
            assert m.source.startswith(SOURCES), (e.id, m.source)
        sources = [m.source for m in e.evidence] + [c.source for c in e.revisit_when if c.source]
        for source in sources:
            if source.startswith("measured here: "):
                path, _, test = source.removeprefix("measured here: ").partition("::")
                assert f"def {test}(" in (REPO / path).read_text(), (e.id, source)


def test_where_the_reports_give_no_reason_the_entry_says_so() -> None:
    for ident in ("torch-compile", "persistent-megakernel", "mtp-high-concurrency", "nccl-tree"):
        e = REGISTRY.get(ident)
        assert "the reports give no reason" in e.reason, ident
        assert "the reports give no reason" in e.revisit.lower() or ident == "mtp-high-concurrency", ident
        assert all("no reason and no figure recorded" in m.change for m in e.evidence if m.change), ident
    assert "measurement" not in REGISTRY.get("torch-compile").reason
    ep4 = REGISTRY.get("expert-parallel-ep4")
    assert "NVLink" not in ep4.reason + ep4.revisit and not any(m.conditions for m in ep4.evidence)


def test_inferences_are_stated_as_inferences() -> None:
    # the needle's rank was never dumped (field report 000, Part V): what follows from it is inference
    topk = REGISTRY.get("index-topk-1024").reason
    assert "The needle ranked beyond 1024" not in topk
    assert "the report infers that 'The needle was ranking beyond 1024'" in topk
    assert "the needle's rank was never measured: the rank dump never ran" in topk
    fp8 = REGISTRY.get("fp8-index-keys").reason
    assert not fp8.startswith("fp8 index keys made the DSA indexer mis-rank the needle")
    assert "is the reports' diagnosis, not a measurement" in fp8 and "never ran" in fp8
    assert "exonerated" in fp8 and "ref [30]" in fp8  # where report 000 speaks against bf16 keys
    ctas = REGISTRY.get("mma-target-ctas-512-default")
    assert all("no wave fill" not in m.metric for m in ctas.evidence)
    assert "(the report names no baseline)" in ctas.evidence[0].metric
    pressure = REGISTRY.get("register-pressure-rewrite")
    assert "reports no spills" not in pressure.reason + pressure.revisit
    assert "says nothing of spills" in pressure.revisit


def test_the_30x3_runs_belong_to_the_co_restart_check() -> None:
    for ident in ("multi-stream-overlap-decode", "hicache-off-corruption-fix"):
        e = REGISTRY.get(ident)
        for m in e.evidence:
            assert "30x3" not in f"{m.metric} {m.before} {m.after} {m.change}", ident
            assert "Thread Three" not in m.source, ident
        assert "the 30x3 repro runs belong to the PD co-restart check (restart-decode-alone" in e.reason, ident
    (restart,) = [m for m in REGISTRY.get("restart-decode-alone").evidence if "30x3" in (m.change or "")]
    assert "co-restart" in restart.metric and "ambiguous" in (restart.change or "")
    streams = REGISTRY.get("multi-stream-overlap-decode").reason
    assert "a canary proved the index-K buffer itself pristine" in streams and "corrupts" not in streams


def test_what_the_reports_exonerated_or_excluded_is_recorded() -> None:
    routed = REGISTRY.get("routed-scaling-recall-suspect")
    assert "the routed-scaling transformation" in routed.reason and "does not carry" in routed.reason
    assert [m.source for m in routed.evidence] == ["field report 000, Part III"]
    excluded = REGISTRY.get("bf16-corruption-excluded-causes")
    assert "excluded read-kernel/PDL/retraction/PD-transfer/memory-overlap/max_seq_len' (field report 004" in (
        excluded.reason
    )
    assert [m.source for m in excluded.evidence] == ["field report 004, Thread One"]
    mxfp4 = REGISTRY.get("mxfp4-base-checkpoint").reason
    assert "'DeepSeek's native format uses ue8m0 scales (power-of-2 exponents" in mxfp4
    assert "e4m3 block scales with 3 mantissa bits" in mxfp4
    assert "'arguably more accurate' (field report 000, Part IV)" in mxfp4


def test_evidence_says_where_it_was_measured() -> None:
    single = [m for m in REGISTRY.get("index-topk-1024").evidence if "5.5k" in m.metric]
    assert len(single) == 1 and "single server (not PD)" in (single[0].hardware or "")
    capture = REGISTRY.get("dp-attention-indexer-capture").evidence[0]
    assert "single server" in (capture.hardware or "") and "PD:" not in (capture.hardware or "")
    moe = REGISTRY.get("mxfp4-base-checkpoint").evidence[0]
    assert "~39%" in str(moe.after) and (moe.model or "").startswith("deepseek-ai/DeepSeek-V4-Flash (MXFP4)")


def test_upstream_text_is_quoted_with_its_file_and_line_not_as_the_report() -> None:
    e = REGISTRY.get("hicache-size-v4")
    quote = "DeepSeek V4 HiCache currently does not support --hicache-size"
    assert all(quote not in (m.change or "") for m in e.evidence)
    assert (
        f"'{quote}; use --hicache-ratio instead.' (mem_cache/hybrid_cache/hybrid_pool_assembler.py:660-664)" in e.reason
    )


# (a file the registry cites, a line inside the cited range, the text the registry says is there)
QUOTED = [
    (
        "python/sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py",
        662,
        "DeepSeek V4 HiCache currently does not support --hicache-size; ",
    ),
    ("python/sglang/srt/batch_overlap/operations_strategy.py", 182, "DeepseekV4 TBO only supports prefill (EXTEND)"),
    ("python/sglang/srt/models/deepseek_v4.py", 4262, "def _can_run_tbo(self"),
    ("python/sglang/srt/arg_groups/attention_hook.py", 599, "if cfg.enable_deterministic_inference:"),
    ("python/sglang/srt/arg_groups/attention_hook.py", 676, 'os.environ["NCCL_ALGO"] = "allreduce:tree"'),
    ("python/sglang/srt/arg_groups/attention_hook.py", 591, "enable_deterministic_inference=True"),
    ("python/sglang/srt/arg_groups/fields/exec_.py", 227, "enable_nvidia_megakernel: A["),
    ("python/sglang/srt/kernel_plugins/nvidia/binding.py", 568, "the persistent grids need"),
    ("python/sglang/srt/arg_groups/fields/exec_.py", 775, "Requires SM90 or SM10X NVIDIA GPUs"),
    ("python/sglang/srt/state_capturer/indexer_topk.py", 33, "IndexerTopkCapturer now only supports DP attention"),
    ("python/sglang/srt/arg_groups/lora_hook.py", 244, "NEXTN has collapsed to EAGLE"),
    ("python/sglang/srt/layers/quantization/mxfp4.py", 427, 'self._fi_kernel = "cutlass_sm120"'),
    (
        "python/sglang/srt/layers/quantization/mxfp4.py",
        1341,
        "Prepare GPT-OSS MXFP4 experts for FlashInfer CUTLASS on SM120",
    ),
    ("python/sglang/srt/layers/attention/dsv4/indexer.py", 1078, "head_dim_with_sf = 68 if use_fp4_indexer else 132"),
    ("python/sglang/srt/environ.py", 1907, "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP = EnvBool(True)"),
    ("python/sglang/srt/configs/deepseek_v4.py", 60, "index_topk: int = 512"),
    ("python/sglang/srt/arg_groups/fields/exec_.py", 732, "enable_mscclpp: A["),
    ("python/sglang/srt/arg_groups/fields/exec_.py", 1051, "enable_single_batch_overlap: A["),
    ("python/sglang/srt/arg_groups/fields/exec_.py", 770, "flashinfer_allreduce_fusion_backend: A["),
    ("python/sglang/srt/arg_groups/fields/exec_.py", 691, "enable_torch_compile: A["),
    ("python/sglang/srt/arg_groups/fields/exec_.py", 1047, "enable_two_batch_overlap: A["),
    ("python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py", 57, "return index_head_dim + index_head_dim // 128 * 4"),
    (
        "python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py",
        319,
        "== ceil_div(self.page_size * bytes_per_token, 576) * 576",
    ),
]


@pytest.mark.upstream
def test_the_upstream_lines_the_registry_cites_say_what_it_quotes(real_cache: Path) -> None:
    from conftest import release_tag

    tag = release_tag(real_cache, "sglang", "0.5.23")

    def show(path: str) -> list[str]:
        res = subprocess.run(
            ["git", "--git-dir", str(real_cache / "upstream.git"), "show", f"{tag}:{path}"],
            capture_output=True,
            text=True,
            check=True,
        )
        return res.stdout.splitlines()

    names = subprocess.run(
        ["git", "--git-dir", str(real_cache / "upstream.git"), "ls-tree", "-r", "--name-only", tag],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for path, line, text in QUOTED:
        assert text in show(path)[line - 1], (path, line, text)
    cited = [
        (e.id, m)
        for e in REGISTRY.entries
        for prose in (e.reason, e.revisit, e.tried, e.unguarded or "", *(c.why for c in e.revisit_when))
        for m in CITATION.finditer(prose)
    ]
    assert len(cited) >= 12
    covered = {(p, n) for p, n, _ in QUOTED}
    for ident, m in cited:
        paths = [n for n in names if n.endswith("/" + m.group(1))]
        assert len(paths) == 1, (ident, m.group(0), paths)  # the citation names one file
        path = paths[0]
        first, last = int(m.group(2)), int(m.group(3) or m.group(2))
        assert last <= len(show(path)), (ident, m.group(0))
        assert any(p == path and first <= n <= last for p, n in covered), (ident, m.group(0))


# -- the registry's patterns, rewritten for RE2, against the lookaround forms they replace ---------

# (entry, knob, the lookaround original, what a line around it is made of): RE2 has no lookaround,
# so retread.toml spells these out; Python's re runs the originals as the oracle
LOOKAROUND = [
    ("index-topk-1024", 0, r"(?!512$)[1-9]\d{3,}", [""], [*list("0123456789"), "512"]),
    (
        "index-topk-1024",
        1,
        r"index_topk:\s*int\s*=\s*(?!512\b)\d+",
        ["index_topk: int =", "index_topk:int= "],
        [*list("0125 x_a"), "512"],
    ),
    (
        "mxfp4-base-checkpoint",
        0,
        r"deepseek-ai/DeepSeek-V4-Flash(?![\w-])",
        ["deepseek-ai/DeepSeek-V4-Flash"],
        list(' -_"a/'),
    ),
    (
        "nonfused-bf16-index-store",
        0,
        r"(?<!def )\bstore_bf16_index_k_torch\(",
        ["store_bf16_index_k_torch("],
        [*list("def x.("), "def ", "  "],
    ),
    (
        "restart-decode-alone",
        0,
        r"\b(?:systemctl|docker(?:-compose|\s+compose)?|podman|kubectl\s+rollout)\s+"
        r"(?:-\S+\s+)*restart\s+(?=[^#\n]*decode)(?![^#\n]*prefill)[^#\n]*",
        ["systemctl restart ", "docker compose -d restart  ", "kubectl rollout restart"],
        [*list(" #xdp\t"), "prefill", "decode", "pre", "prefil", "refill", "ppre"],
    ),
    (
        "restart-decode-alone",
        1,
        r"^\s*Restart\s*=\s*(?!no\s*$)\S+|^\s*restart\s*:\s*[\"']?(?:always|on-failure|"
        r"unless-stopped)\b|--restart[= ][\"']?(?:always|on-failure|unless-stopped)\b",
        ["Restart=", " Restart = ", "restart: ", "--restart="],
        [*list(" no\t#x"), "always", "no", "unless-stopped"],
    ),
]


@pytest.mark.parametrize(
    ("entry", "knob", "original", "anchors", "pieces"), LOOKAROUND, ids=[f"{e}-{k}" for e, k, *_ in LOOKAROUND]
)
def test_an_re2_rewrite_agrees_with_its_lookaround_original(
    entry: str, knob: int, original: str, anchors: list[str], pieces: list[str]
) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    guard = next(e for e in REGISTRY.entries if e.id == entry).knobs[knob]
    pattern = guard.values if guard.values is not None else guard.regex
    assert pattern is not None
    oracle = re.compile(original, 0 if guard.values is not None else re.MULTILINE)
    words = st.lists(st.sampled_from(pieces), max_size=7).map("".join)

    @settings(max_examples=400, derandomize=True, database=None)
    @given(before=words, anchor=st.sampled_from(anchors), after=words)
    def agrees(before: str, anchor: str, after: str) -> None:
        line = before + anchor + after
        if guard.values is not None:
            assert pattern.fullmatch(line) == (oracle.fullmatch(line) is not None), line
        else:
            assert (pattern.search(line) is not None) == (oracle.search(line) is not None), line

    agrees()
