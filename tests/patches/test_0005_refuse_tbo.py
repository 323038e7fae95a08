"""0005: DeepSeek-V4 refuses --enable-two-batch-overlap where it is not wired.

Loads the guard module straight from the patched tree (no sglang import, no
torch) and checks that deepseek_v4_hook.apply_deepseek_v4_defaults calls it.
"""

import ast

import pytest

from patchtool.testing import load_module

pytestmark = pytest.mark.upstream

ARG_GROUPS = ("python", "sglang", "srt", "arg_groups")
GUARD_FN = "check_deepseek_v4_two_batch_overlap"
GUARD_MODULE = "sglang.srt.arg_groups.dsv4_tbo_guard"
V4 = "deepseek_v4"
V41 = "deepseek_v41"


@pytest.fixture(scope="module")
def guard(patched_tree):
    return getattr(load_module(patched_tree.joinpath(*ARG_GROUPS, "dsv4_tbo_guard.py"), "_dsv4_tbo_guard_0005"),
                   GUARD_FN)


def _check(guard, *, tbo=True, model_type=V4, mode="null", pp_size=1):
    guard(
        enable_two_batch_overlap=tbo,
        model_type=model_type,
        disaggregation_mode=mode,
        pp_size=pp_size,
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
def test_prefill_paths_keep_tbo(guard, mode):
    # V4 prefill TBO is wired (EP all-to-all or the attention-DP path).
    _check(guard, mode=mode)


@pytest.mark.parametrize("mode", ["null", "prefill", "decode"])
@pytest.mark.parametrize("pp_size", [1, 2])
def test_tbo_disabled_never_raises(guard, mode, pp_size):
    _check(guard, tbo=False, mode=mode, pp_size=pp_size)


@pytest.mark.parametrize("mode", ["null", "prefill", "decode"])
def test_v41_left_to_upstream_check(guard, mode):
    # validate_deepseek_v41_features rejects every V4.1 TBO on its own.
    _check(guard, model_type=V41, mode=mode, pp_size=2)


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
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == GUARD_FN
    ]
    assert len(calls) == 1
    keywords = {kw.arg: ast.unparse(kw.value) for kw in calls[0].keywords}
    assert keywords == {
        "enable_two_batch_overlap": "cfg.enable_two_batch_overlap",
        "model_type": "model_config_of(server_args).hf_config.model_type",
        "disaggregation_mode": "cfg.disaggregation_mode",
        "pp_size": "cfg.pp_size",
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
        "handle_model_specific_adjustments no longer calls "
        "apply_deepseek_v4_defaults for DeepseekV4ForCausalLM"
    )
