"""0004: PD prefill and decode servers honour --max-queued-requests.

Loads the admission module straight from the patched tree (no sglang import,
no torch), exercises its rule, and checks with `ast` that
Scheduler._add_request_to_queue calls the check in both disaggregation
branches and that the help text no longer says the flag is ignored there.
"""

import ast

import pytest

from patchtool.testing import load_module

pytestmark = pytest.mark.upstream

SRT = ("python", "sglang", "srt")
CHECK_FN = "abort_on_disagg_queued_limit"
FLAG = "--max-queued-requests"


@pytest.fixture(scope="module")
def admission(patched_tree):
    return load_module(patched_tree.joinpath(*SRT, "disaggregation", "admission.py"), "_pd_admission_0004")


def _prefill(bootstrap=0, waiting=0, **other):
    return {"bootstrap": bootstrap, "waiting": waiting, **other}


def _decode(prealloc=0, transfer=0, waiting=0, **other):
    return {"prealloc": prealloc, "transfer": transfer, "waiting": waiting, **other}


@pytest.mark.parametrize(
    "mode, queue_lens",
    [("prefill", _prefill(bootstrap=20, waiting=11)), ("decode", _decode(10, 10, 11))],
)
def test_admits_under_the_cap(admission, mode, queue_lens):
    # 31 queued: the incoming request is the 32nd, which a cap of 32 admits.
    assert admission.queued_limit_error(32, mode, queue_lens) is None


@pytest.mark.parametrize(
    "mode, queue_lens",
    [
        ("prefill", _prefill(bootstrap=20, waiting=12)),
        ("prefill", _prefill(bootstrap=0, waiting=40)),
        ("decode", _decode(10, 10, 12)),
        ("decode", _decode(prealloc=33)),
    ],
)
def test_refuses_at_and_over_the_cap(admission, mode, queue_lens):
    message = admission.queued_limit_error(32, mode, queue_lens)
    assert message is not None
    assert FLAG in message, message
    assert f"--disaggregation-mode {mode}" in message, message
    assert "32" in message, message


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_no_limit_never_refuses(admission, mode):
    huge = 10**6
    lens = _prefill(huge, huge) if mode == "prefill" else _decode(huge, huge, huge)
    assert admission.queued_limit_error(None, mode, lens) is None


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_zero_refuses_everything_like_the_colocated_path(admission, mode):
    # `_abort_on_queued_limit` treats only None as "no limit"; 0 admits nothing.
    lens = _prefill() if mode == "prefill" else _decode()
    assert admission.queued_limit_error(0, mode, lens) is not None
    assert admission.queued_limit_error(1, mode, lens) is None


def test_prefill_counts_bootstrap_and_waiting_only(admission):
    count = admission.num_queued_requests
    assert count("prefill", _prefill(bootstrap=3, waiting=4)) == 7
    # Prefilled requests only sending KV are not queued.
    assert count("prefill", _prefill(bootstrap=3, waiting=4, inflight=50)) == 7
    assert admission.queued_limit_error(8, "prefill", _prefill(3, 4, inflight=50)) is None
    assert admission.queued_limit_error(7, "prefill", _prefill(3, 4)) is not None


def test_decode_counts_prealloc_transfer_and_waiting_only(admission):
    count = admission.num_queued_requests
    assert count("decode", _decode(prealloc=2, transfer=3, waiting=4)) == 9
    # Retracted requests were already running; they are not queued.
    assert count("decode", _decode(2, 3, 4, retracted=50)) == 9
    assert admission.queued_limit_error(10, "decode", _decode(2, 3, 4, retracted=50)) is None
    assert admission.queued_limit_error(9, "decode", _decode(2, 3, 4)) is not None


@pytest.mark.parametrize(
    "mode, queue_lens",
    [("prefill", {"waiting": 1}), ("decode", {"prealloc": 1, "waiting": 1})],
)
def test_missing_queue_length_is_an_error(admission, mode, queue_lens):
    with pytest.raises(ValueError):
        admission.num_queued_requests(mode, queue_lens)


def test_unknown_mode_is_an_error(admission):
    with pytest.raises(ValueError):
        admission.queued_limit_error(32, "null", {"waiting": 0})


def _mode_of(test):
    """'PREFILL' for `self.disaggregation_mode == DisaggregationMode.PREFILL`."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.left, ast.Attribute)
        and test.left.attr == "disaggregation_mode"
        and isinstance(test.comparators[0], ast.Attribute)
        and isinstance(test.comparators[0].value, ast.Name)
        and test.comparators[0].value.id == "DisaggregationMode"
    ):
        return test.comparators[0].attr
    return None


def _calls(nodes, name):
    found = []
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                func = sub.func
                callee = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if callee == name:
                    found.append(sub)
    return found


@pytest.fixture(scope="module")
def add_request_branches(patched_tree):
    path = patched_tree.joinpath(*SRT, "managers", "scheduler.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    scheduler = next(
        node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Scheduler"
    )
    method = next(
        node
        for node in scheduler.body
        if isinstance(node, ast.FunctionDef) and node.name == "_add_request_to_queue"
    )
    branches = {}
    for node in ast.walk(method):
        if isinstance(node, ast.If):
            mode = _mode_of(node.test)
            if mode is not None:
                branches[mode] = node.body
    return branches


@pytest.mark.parametrize("mode", ["PREFILL", "DECODE"])
def test_scheduler_checks_the_limit_in_disaggregation_branch(add_request_branches, mode):
    assert mode in add_request_branches, sorted(add_request_branches)
    body = add_request_branches[mode]
    calls = _calls(body, CHECK_FN)
    assert calls, f"DisaggregationMode.{mode} branch does not call {CHECK_FN}"
    # The check must run before the request reaches the queue's `add`.
    first_add = min(call.lineno for call in _calls(body, "add"))
    assert min(call.lineno for call in calls) < first_add


def test_null_branch_keeps_upstream_check(add_request_branches):
    assert _calls(add_request_branches["NULL"], "_abort_on_queued_limit")


def test_help_text_no_longer_says_ignored_in_disaggregation_mode(patched_tree):
    path = patched_tree.joinpath(*SRT, "arg_groups", "fields", "schedule.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    help_texts = [
        node.value
        for stmt in ast.walk(tree)
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(stmt.target, ast.Name)
        and stmt.target.id == "max_queued_requests"
        for node in ast.walk(stmt.annotation)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    assert help_texts, "max_queued_requests has no help text"
    text = " ".join(help_texts)
    assert "ignored" not in text.lower(), text
    assert "disaggregation" in text.lower(), text
