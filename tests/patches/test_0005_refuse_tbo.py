"""0005: DeepSeek-V4 refuses --enable-two-batch-overlap where it is not wired.

Loads the guard module straight from the patched tree (no sglang import, no
torch) and checks that deepseek_v4_hook.apply_deepseek_v4_defaults calls it.
"""

import ast

import pytest

from helpers import load_module

pytestmark = pytest.mark.upstream

ARG_GROUPS = ("python", "sglang", "srt", "arg_groups")
GUARD_FN = "check_deepseek_v4_two_batch_overlap"
GUARD_MODULE = "sglang.srt.arg_groups.dsv4_tbo_guard"
V4 = "deepseek_v4"
V41 = "deepseek_v41"


@pytest.fixture(scope="module")
def guard(patched_tree):
    return getattr(
        load_module(patched_tree.joinpath(*ARG_GROUPS, "dsv4_tbo_guard.py"), "_dsv4_tbo_guard_0005"), GUARD_FN
    )


def _check(guard, *, tbo=True, model_type=V4, mode="null", pp_size=1, prefill_cp=False, cp_strategy=None):
    guard(
        enable_two_batch_overlap=tbo,
        model_type=model_type,
        disaggregation_mode=mode,
        pp_size=pp_size,
        enable_prefill_cp=prefill_cp,
        cp_strategy=cp_strategy,
    )


def test_decode_server_refuses_tbo(guard):
    with pytest.raises(ValueError) as excinfo:
        _check(guard, mode="decode")
    message = str(excinfo.value)
    for needle in (
        "DeepSeek-V4",
        "two-batch overlap",
        "--disaggregation-mode decode",
        "OperationsStrategy.init_new_tbo",
        "NotImplementedError",
        "_can_run_tbo",
        "Drop --enable-two-batch-overlap",
    ):
        assert needle in message, (needle, message)


@pytest.mark.parametrize("mode", ["null", "prefill", "decode"])
def test_pipeline_parallel_refuses_tbo(guard, mode):
    with pytest.raises(ValueError) as excinfo:
        _check(guard, mode=mode, pp_size=2)
    message = str(excinfo.value)
    assert "two-batch overlap" in message
    assert "_can_run_tbo" in message
    assert "--enable-two-batch-overlap" in message
    if mode != "decode":
        assert "--pp-size 2" in message


@pytest.mark.parametrize("mode", ["null", "prefill"])
@pytest.mark.parametrize("cp_strategy", ["interleave", None])
def test_prefill_context_parallel_refuses_tbo(guard, mode, cp_strategy):
    # _can_run_tbo skips every batch CP shards; interleave shards every prefill batch
    # of at least attn_cp_size tokens, and CUDA CP keeps attention DP at 1
    with pytest.raises(ValueError) as excinfo:
        _check(guard, mode=mode, prefill_cp=True, cp_strategy=cp_strategy)
    message = str(excinfo.value)
    for needle in ("--enable-prefill-cp", "_can_run_tbo", "attention DP", "Drop --enable-two-batch-overlap"):
        assert needle in message, (needle, message)


def test_context_parallel_on_a_decode_server_refuses_tbo(guard):
    # V4's CP is prefill-only; on a decode server the decode reason is the one that holds
    with pytest.raises(ValueError, match="--disaggregation-mode decode"):
        _check(guard, mode="decode", prefill_cp=True, cp_strategy="interleave")


def test_zigzag_context_parallel_left_to_upstream(guard):
    # zigzag (NPU only) leaves batches with a short sequence unsharded, where TBO can run
    _check(guard, mode="prefill", prefill_cp=True, cp_strategy="zigzag")


@pytest.mark.parametrize("mode", ["null", "prefill"])
def test_prefill_paths_keep_tbo(guard, mode):
    # V4 prefill TBO is wired (EP all-to-all or the attention-DP path).
    _check(guard, mode=mode)
    _check(guard, mode=mode, cp_strategy="interleave")  # a strategy without --enable-prefill-cp


@pytest.mark.parametrize("mode", ["null", "prefill", "decode"])
@pytest.mark.parametrize("pp_size", [1, 2])
@pytest.mark.parametrize("prefill_cp", [False, True])
def test_tbo_disabled_never_raises(guard, mode, pp_size, prefill_cp):
    _check(guard, tbo=False, mode=mode, pp_size=pp_size, prefill_cp=prefill_cp, cp_strategy="interleave")


@pytest.mark.parametrize("mode", ["null", "prefill", "decode"])
def test_v41_left_to_upstream_check(guard, mode):
    # validate_deepseek_v41_features rejects every V4.1 TBO on its own.
    _check(guard, model_type=V41, mode=mode, pp_size=2, prefill_cp=True, cp_strategy="interleave")


def _upstream_tbo_check(patched_tree):
    """Upstream's check_two_batch_overlap (validation_hook.py), run on plain values."""
    from types import SimpleNamespace

    source = patched_tree.joinpath(*ARG_GROUPS, "validation_hook.py").read_text()
    ns = {"Any": object, "resolving_view": lambda args: args, "attn_dp_enabled_of": lambda cfg: cfg.attn_dp_size > 1}
    exec(
        compile(
            ast.Module(body=[_function(ast.parse(source), "check_two_batch_overlap")], type_ignores=[]),
            "<validation_hook>",
            "exec",
        ),
        ns,
    )

    def check(**kw):
        ns["check_two_batch_overlap"](SimpleNamespace(enable_two_batch_overlap=True, **kw))

    return check


def test_what_upstream_already_refuses(guard, patched_tree):
    """In the field's topology (TP4, moe_a2a_backend 'none', no attention DP) upstream
    already refuses TBO; the guard adds the decode / PP / prefill-CP cases that pass
    upstream's check and still never run TBO."""
    upstream = _upstream_tbo_check(patched_tree)
    with pytest.raises(ValueError, match="attention DP"):
        upstream(moe_a2a_backend="none", attn_dp_size=1)
    for passes_upstream in (
        {"moe_a2a_backend": "deepep", "attn_dp_size": 1},
        {"moe_a2a_backend": "none", "attn_dp_size": 4},
    ):
        upstream(**passes_upstream)
        for case in ({"mode": "decode"}, {"pp_size": 2}, {"prefill_cp": True, "cp_strategy": "interleave"}):
            with pytest.raises(ValueError, match="DeepSeek-V4 does not run two-batch overlap"):
                _check(guard, **case)


def test_only_rocm_refused_tbo_with_prefill_cp(patched_tree):
    # validate_deepseek_v4_cp rejects TBO with prefill CP on HIP only: CUDA needed the guard
    hook = ast.parse(patched_tree.joinpath(*ARG_GROUPS, "deepseek_v4_hook.py").read_text())
    func = _function(hook, "validate_deepseek_v4_cp")
    hits = [
        node for node in ast.walk(func) if isinstance(node, ast.Constant) and node.value == "--enable-two-batch-overlap"
    ]
    assert len(hits) == 1
    hip = next(
        node
        for node in ast.walk(func)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "get_platform().is_hip"
    )
    assert any(node is hits[0] for node in ast.walk(hip))


def _function(tree, name):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"{name} not found")


def test_hook_calls_guard(patched_tree):
    hook = patched_tree.joinpath(*ARG_GROUPS, "deepseek_v4_hook.py")
    tree = ast.parse(hook.read_text(), filename=str(hook))
    func = _function(tree, "apply_deepseek_v4_defaults")

    imported = [
        alias.name
        for node in ast.walk(func)
        if isinstance(node, ast.ImportFrom) and node.module == GUARD_MODULE
        for alias in node.names
    ]
    assert GUARD_FN in imported

    calls = [
        node
        for node in ast.walk(func)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == GUARD_FN
    ]
    assert len(calls) == 1
    keywords = {kw.arg: ast.unparse(kw.value) for kw in calls[0].keywords}
    assert keywords == {
        "enable_two_batch_overlap": "cfg.enable_two_batch_overlap",
        "model_type": "model_config_of(server_args).hf_config.model_type",
        "disaggregation_mode": "cfg.disaggregation_mode",
        "pp_size": "cfg.pp_size",
        "enable_prefill_cp": "cfg.enable_prefill_cp",
        "cp_strategy": "cfg.cp_strategy",
    }

    # The guard leaves V4.1 alone; upstream must still reject TBO there.
    v41 = ast.unparse(_function(tree, "validate_deepseek_v41_features"))
    assert "('two-batch overlap', cfg.enable_two_batch_overlap)" in v41


def test_model_hook_runs_hook_for_v4(patched_tree):
    model_hook = patched_tree.joinpath(*ARG_GROUPS, "model_hook.py")
    tree = ast.parse(model_hook.read_text(), filename=str(model_hook))
    func = _function(tree, "handle_model_specific_adjustments")
    for node in ast.walk(func):
        if (
            isinstance(node, ast.If)
            and "'DeepseekV4ForCausalLM'" in ast.unparse(node.test)
            and any(
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id == "apply_deepseek_v4_defaults"
                for stmt in node.body
                for call in ast.walk(stmt)
            )
        ):
            return
    raise AssertionError(
        "handle_model_specific_adjustments no longer calls apply_deepseek_v4_defaults for DeepseekV4ForCausalLM"
    )
