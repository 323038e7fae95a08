"""0004: a PD prefill server admits or refuses each request, and frees a refused request's decode half.

The admission module is loaded straight from the patched tree. Its rule is a pure
function; its scheduler mixin is driven with a fake scheduler on the CPU. The few sglang
names the mixin imports when it runs (KVPoll, DisaggregationMode, FAKE_BOOTSTRAP_HOST,
is_aborted) are executed from the patched tree's own source into stand-in modules; only
FINISH_ABORT and _make_abort_req are fakes. `ast` checks that the scheduler and the
bootstrap queue call the mixin where the patch says.
"""

from __future__ import annotations
import __future__

import ast
import dataclasses
import enum
import logging
import re
import sys
import textwrap
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from helpers import load_module

pytestmark = pytest.mark.upstream

SRT = ("python", "sglang", "srt")
MIXIN = "SchedulerDisaggregationAdmissionMixin"
DOOR = "abort_on_disagg_queued_limit"
RESOLVE = "resolve_refused_prefill_reqs"

# Field report 000, part I: the prefill queue at saturation.
INCIDENT_REQUESTS = 20
INCIDENT_TOKENS = 220_000
# The field's request cap (field report 000, part I; patchset.toml recommends it for prefill).
RECOMMENDED_REQUESTS = 32
# A token cap to exercise the rule with: a test input, not a recommendation (patchset.toml
# recommends no token cap; the reports give no failure threshold in tokens).
EXAMPLE_TOKENS = 110_000


@pytest.fixture(scope="module")
def admission(patched_tree: Path) -> types.ModuleType:
    # `dataclass` looks its module up in sys.modules while it builds the class.
    name = "_pd_admission_0004"
    sys.modules[name] = placeholder = types.ModuleType(name)
    try:
        module = load_module(patched_tree.joinpath(*SRT, "disaggregation", "admission.py"), name)
    finally:
        del sys.modules[name]
    assert module is not placeholder
    return module


# --- stand-ins for the sglang modules the mixin imports when it runs ---------------------------


def _upstream(path: Path, names: set[str], namespace: dict[str, Any]) -> dict[str, Any]:
    """Execute the top-level definitions `names` of an upstream file into `namespace`."""
    source = path.read_text(encoding="utf-8")
    found = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            name = node.name
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        else:
            continue
        if name in names:
            segment = ast.get_source_segment(source, node)
            assert segment is not None
            exec(
                compile(segment, str(path), "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True),
                namespace,
            )
            found.add(name)
    assert found == names, f"{path}: missing {names - found}"
    return namespace


def _upstream_method(path: Path, cls: str, name: str) -> Any:
    """A method of an upstream class, executed from its source as a plain function."""
    source = path.read_text(encoding="utf-8")
    klass = next(node for node in ast.parse(source).body if isinstance(node, ast.ClassDef) and node.name == cls)
    method = next(node for node in klass.body if isinstance(node, ast.FunctionDef) and node.name == name)
    segment = ast.get_source_segment(source, method, padded=True)
    assert segment is not None
    namespace: dict[str, Any] = {}
    exec(
        compile(
            textwrap.dedent(segment), str(path), "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True
        ),
        namespace,
    )
    return namespace[name]


class FinishAbort:
    def __init__(self, message: str = "Unknown error", status_code: int | None = None) -> None:
        self.message = message
        self.status_code = status_code


def _make_abort_req(req: Any, finished_reason: dict | None = None) -> types.SimpleNamespace:
    return types.SimpleNamespace(rid=req.rid, finished_reason=finished_reason)


@dataclass
class Upstream:
    KVPoll: Any
    DisaggregationMode: Any
    FAKE_BOOTSTRAP_HOST: str
    get_num_pending_tokens: Any  # SchedulerLoadInquirer._get_num_pending_tokens


@pytest.fixture(scope="module")
def upstream_names(patched_tree: Path) -> dict[str, dict[str, Any]]:
    disagg = patched_tree.joinpath(*SRT, "disaggregation")
    base = _upstream(disagg / "base" / "conn.py", {"KVPoll"}, {})
    utils = _upstream(
        disagg / "utils.py", {"DisaggregationMode", "FAKE_BOOTSTRAP_HOST", "is_aborted"}, {"Enum": enum.Enum}
    )
    pending = _upstream_method(
        patched_tree.joinpath(*SRT, "managers", "scheduler_components", "load_inquirer.py"),
        "SchedulerLoadInquirer",
        "_get_num_pending_tokens",
    )
    return {"base": base, "utils": utils, "load_inquirer": {"_get_num_pending_tokens": pending}}


@pytest.fixture
def upstream(upstream_names: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> Upstream:
    modules = {
        "sglang.srt.disaggregation.base": upstream_names["base"],
        "sglang.srt.disaggregation.utils": upstream_names["utils"],
        "sglang.srt.managers.schedule_batch": {"FINISH_ABORT": FinishAbort},
        "sglang.srt.managers.scheduler": {"_make_abort_req": _make_abort_req},
    }
    for name, names in modules.items():
        module = types.ModuleType(name)
        module.__dict__.update(names)
        monkeypatch.setitem(sys.modules, name, module)
    utils = upstream_names["utils"]
    return Upstream(
        upstream_names["base"]["KVPoll"],
        utils["DisaggregationMode"],
        utils["FAKE_BOOTSTRAP_HOST"],
        upstream_names["load_inquirer"]["_get_num_pending_tokens"],
    )


# --- a fake scheduler around the real mixin ----------------------------------------------------


@dataclass
class FakeReq:
    rid: str
    input_len: int
    prefix_len: int = 0
    is_retracted: bool = False
    bootstrap_host: str = "10.0.0.7"
    bootstrap_room: int = 1234
    to_finish: Any = None
    finished_reason: Any = None
    disagg_kv_sender: Any = None
    trace_aborts: list = field(default_factory=list)

    @property
    def seqlen(self) -> int:
        return self.input_len

    @property
    def time_stats(self) -> types.SimpleNamespace:
        def abort(*, abort_info: dict) -> None:
            self.trace_aborts.append(abort_info)

        return types.SimpleNamespace(trace_ctx=types.SimpleNamespace(abort=abort))


class FakeKVManager:
    def __init__(self, log: list, *, deferred_bootstrap: Any = None) -> None:
        self.log = log
        self.deferred_bootstrap = deferred_bootstrap

    def conclude_failure(self, *, bootstrap_room: int, failure_reason: str) -> None:
        self.log.append(("conclude_failure", bootstrap_room, failure_reason))


class FakeSender:
    def __init__(self, log: list, room: int, kv_mgr: FakeKVManager, failed: int) -> None:
        self.log = log
        self.failed = failed
        self.bootstrap_room = room
        self.kv_mgr = kv_mgr
        self.polls: list[int] = []
        self.aborted_as: int | None = None

    def poll(self) -> int:
        # CommonKVSender._poll_with_status: an aborted sender reports its conclusion.
        status = self.polls.pop(0)
        return status if self.aborted_as is None else self.aborted_as

    def clear(self) -> None:
        self.log.append(("clear", self.bootstrap_room))

    def init(self, num_kv_indices: int, aux_index: int | None = None) -> None:
        self.log.append(("sender.init", self.bootstrap_room))

    def send(self, *args: Any, **kwargs: Any) -> None:
        self.log.append(("sender.send", self.bootstrap_room))

    def abort(self) -> None:
        self.log.append(("sender.abort", self.bootstrap_room))
        self.aborted_as = self.failed


class FakeBootstrapQueue:
    def __init__(self, log: list, failed: int, *, fits: bool = True, deferred_bootstrap: Any = None) -> None:
        self.log = log
        self.failed = failed
        self.queue: list[FakeReq] = []
        self.fits = fits
        self.kv_mgr = FakeKVManager(log, deferred_bootstrap=deferred_bootstrap)

    def create_sender(self, req: FakeReq, num_kv_heads: int) -> bool:
        self.log.append(("create_sender", req.rid, num_kv_heads))
        if not self.fits:
            return False
        req.disagg_kv_sender = FakeSender(self.log, req.bootstrap_room, self.kv_mgr, self.failed)
        return True


def _scheduler(
    admission: types.ModuleType,
    upstream: Upstream,
    *,
    mode: str = "prefill",
    max_requests: int | None = RECOMMENDED_REQUESTS,
    max_tokens: int | None = EXAMPLE_TOKENS,
    fits: bool = True,
    deferred_bootstrap: Any = None,
    priority: bool = False,
) -> Any:
    log: list = []

    class FakeScheduler(admission.SchedulerDisaggregationAdmissionMixin):
        def send_abort_output(self, abort_req: Any, req: Any) -> None:
            log.append(("send_abort_output", abort_req, req.rid))

        def _release_aborted_request(self, req: Any) -> None:
            log.append(("release", req.rid))

    scheduler = FakeScheduler()
    scheduler.log = log
    scheduler.disaggregation_mode = upstream.DisaggregationMode(mode)
    scheduler.max_queued_requests = max_requests
    scheduler.enable_priority_scheduling = priority
    scheduler.disagg_prefill_bootstrap_queue = FakeBootstrapQueue(
        log, upstream.KVPoll.Failed, fits=fits, deferred_bootstrap=deferred_bootstrap
    )
    scheduler.waiting_queue = []
    scheduler.disagg_prefill_inflight_queue = []
    scheduler.chunked_req = None
    scheduler.model_config = types.SimpleNamespace(num_key_value_heads=8)
    # SchedulerLoadInquirer's view of the scheduler, as Scheduler.init_load_inquirer wires it.
    inquirer = types.SimpleNamespace(
        get_waiting_queue=lambda: scheduler.waiting_queue, get_chunked_req=lambda: scheduler.chunked_req
    )
    inquirer._get_num_pending_tokens = types.MethodType(upstream.get_num_pending_tokens, inquirer)
    scheduler.load_inquirer = inquirer
    scheduler.beam_coordinator = types.SimpleNamespace(retire_group=lambda req: log.append(("retire_group", req.rid)))
    scheduler.init_disagg_admission(max_tokens)
    return scheduler


def _fill(scheduler: Any, *, bootstrap: int = 0, waiting: int = 0, tokens_each: int = 1000) -> None:
    scheduler.disagg_prefill_bootstrap_queue.queue += [FakeReq(f"b{i}", tokens_each) for i in range(bootstrap)]
    scheduler.waiting_queue += [FakeReq(f"w{i}", tokens_each) for i in range(waiting)]


# --- the rule ----------------------------------------------------------------------------------


def _error(
    admission: types.ModuleType,
    *,
    requests: int = 0,
    tokens: int = 0,
    incoming: int = 1000,
    max_requests: int | None = None,
    max_tokens: int | None = None,
) -> str | None:
    return admission.queued_limit_error(
        max_queued_requests=max_requests,
        max_queued_tokens=max_tokens,
        load=admission.PrefillQueueLoad(requests=requests, tokens=tokens),
        incoming_tokens=incoming,
    )


def test_request_cap_follows_the_colocated_rule(admission):
    # `_abort_on_queued_limit`: the queue, with the new request, holds at most the cap.
    assert _error(admission, requests=31, max_requests=32) is None
    message = _error(admission, requests=32, max_requests=32)
    assert message is not None and "--max-queued-requests" in message and "32" in message
    # Only None means no limit; 0 admits nothing.
    assert _error(admission, requests=0, max_requests=0) is not None
    assert _error(admission, requests=10**6) is None


def test_token_cap_counts_the_new_request(admission):
    assert _error(admission, tokens=100_000, incoming=10_000, max_tokens=110_000) is None
    message = _error(admission, tokens=100_000, incoming=10_001, max_tokens=110_000)
    assert message is not None
    for needle in ("--max-queued-tokens 110000", "100000 input tokens", "10001"):
        assert needle in message, (needle, message)
    assert _error(admission, tokens=10**9, incoming=10**6) is None


def test_a_request_that_finds_nothing_waiting_is_admitted_whatever_its_length(admission):
    assert _error(admission, tokens=0, incoming=500_000, max_tokens=110_000) is None
    assert _error(admission, tokens=1, incoming=500_000, max_tokens=110_000) is not None


def test_the_incident_queue_passes_the_request_cap_and_not_the_token_cap(admission):
    """Field report 000, part I: ~20 requests and ~220,000 tokens queued at prefill."""
    mean_prompt = INCIDENT_TOKENS // INCIDENT_REQUESTS
    assert mean_prompt == 11_000  # patchset.toml quotes it: "the prompts averaged ~11,000 tokens"
    incident = admission.PrefillQueueLoad(requests=INCIDENT_REQUESTS, tokens=INCIDENT_TOKENS)

    def error(max_requests, max_tokens):
        return admission.queued_limit_error(
            max_queued_requests=max_requests, max_queued_tokens=max_tokens, load=incident, incoming_tokens=mean_prompt
        )

    # The field's cap alone admits the 21st request: it never fired in the incident.
    assert error(RECOMMENDED_REQUESTS, None) is None
    # A token cap at the incident's own depth refuses it; one prompt above that admits it.
    assert error(None, INCIDENT_TOKENS) is not None
    assert error(None, INCIDENT_TOKENS + mean_prompt) is None
    assert error(RECOMMENDED_REQUESTS, EXAMPLE_TOKENS) is not None
    # At the incident's mean prompt the token cap admits the 10th request and refuses the 11th.
    admitted = 0
    while (
        admission.queued_limit_error(
            max_queued_requests=RECOMMENDED_REQUESTS,
            max_queued_tokens=EXAMPLE_TOKENS,
            load=admission.PrefillQueueLoad(requests=admitted, tokens=admitted * mean_prompt),
            incoming_tokens=mean_prompt,
        )
        is None
    ):
        admitted += 1
    assert admitted == 10


# --- what the scheduler counts -----------------------------------------------------------------


def test_load_counts_bootstrap_and_waiting_queues_and_the_chunked_remainder(admission, upstream):
    scheduler = _scheduler(admission, upstream)
    _fill(scheduler, bootstrap=3, waiting=4, tokens_each=1000)
    # Prefilled requests that only wait for their KV to be sent are not queued.
    scheduler.disagg_prefill_inflight_queue += [FakeReq("i", 50_000)]
    scheduler.chunked_req = FakeReq("c", 20_000, prefix_len=8_192)
    load = scheduler.disagg_prefill_queue_load()
    assert load == admission.PrefillQueueLoad(requests=7, tokens=7_000 + 11_808)


# --- the door ----------------------------------------------------------------------------------


def test_door_admits_under_both_caps(admission, upstream):
    scheduler = _scheduler(admission, upstream)
    _fill(scheduler, bootstrap=2, waiting=2, tokens_each=10_000)
    assert getattr(scheduler, DOOR)(FakeReq("new", 10_000)) is False
    assert scheduler.log == []
    assert scheduler.disagg_prefill_refused == []


def test_door_refuses_with_503_and_keeps_the_sender_for_the_decode_half(admission, upstream):
    scheduler = _scheduler(admission, upstream)
    _fill(scheduler, bootstrap=5, waiting=5, tokens_each=10_000)
    req = FakeReq("new", 11_000, bootstrap_room=77)
    assert getattr(scheduler, DOOR)(req) is True

    kinds = [entry[0] for entry in scheduler.log]
    assert kinds == ["create_sender", "send_abort_output", "retire_group", "release"], scheduler.log
    assert scheduler.log[0] == ("create_sender", "new", 8)
    abort_req = scheduler.log[1][1]
    assert abort_req.rid == "new"
    reason = abort_req.finished_reason
    assert reason["type"] == "abort" and reason["status_code"] == 503, reason
    assert "--max-queued-tokens 110000" in reason["message"], reason
    assert req.trace_aborts == [{"reason": reason["message"]}]
    # The refused request is queued nowhere; its sender waits for the decode half.
    assert req not in scheduler.waiting_queue + scheduler.disagg_prefill_bootstrap_queue.queue
    [half] = scheduler.disagg_prefill_refused
    assert half.sender is req.disagg_kv_sender and half.reason == reason["message"]


def test_door_refuses_by_request_count(admission, upstream):
    scheduler = _scheduler(admission, upstream, max_tokens=None)
    _fill(scheduler, bootstrap=16, waiting=16, tokens_each=10)
    req = FakeReq("new", 10)
    assert getattr(scheduler, DOOR)(req) is True
    assert "--max-queued-requests 32" in scheduler.log[1][1].finished_reason["message"]


def test_prefill_complete_policy_aborts_the_sender_at_once(admission, upstream):
    # The transport keeps the failed room (DeferredBootstrap) and answers decode with it.
    scheduler = _scheduler(admission, upstream, deferred_bootstrap=object())
    _fill(scheduler, waiting=32)
    req = FakeReq("new", 10, bootstrap_room=5)
    assert getattr(scheduler, DOOR)(req) is True
    assert ("sender.abort", 5) in scheduler.log
    scheduler.log.clear()
    req.disagg_kv_sender.polls = [upstream.KVPoll.Bootstrapping]
    getattr(scheduler, RESOLVE)()
    assert scheduler.log == [("clear", 5)]


def test_early_policy_keeps_the_sender_open(admission, upstream):
    scheduler = _scheduler(admission, upstream)
    _fill(scheduler, waiting=32)
    assert getattr(scheduler, DOOR)(FakeReq("new", 10, bootstrap_room=5)) is True
    assert ("sender.abort", 5) not in scheduler.log


def test_prompt_beyond_kv_capacity_keeps_its_own_error(admission, upstream):
    # create_sender answers it with a 400 and returns False: no second answer, nothing kept.
    scheduler = _scheduler(admission, upstream, fits=False)
    _fill(scheduler, waiting=32)
    assert getattr(scheduler, DOOR)(FakeReq("huge", 10**7)) is True
    assert [entry[0] for entry in scheduler.log] == ["create_sender", "retire_group", "release"]
    assert scheduler.disagg_prefill_refused == []


def _full(admission, upstream, **kwargs):
    scheduler = _scheduler(admission, upstream, **kwargs)
    _fill(scheduler, bootstrap=20, waiting=20, tokens_each=10_000)
    return scheduler


def test_retracted_request_is_never_refused(admission, upstream):
    scheduler = _full(admission, upstream)
    assert getattr(scheduler, DOOR)(FakeReq("back", 10_000, is_retracted=True)) is False
    assert scheduler.log == []


@pytest.mark.parametrize("where", ["to_finish", "finished_reason"])
def test_request_rejected_at_intake_keeps_its_own_error(admission, upstream, where):
    scheduler = _full(admission, upstream)
    req = FakeReq("bad", 10_000, **{where: FinishAbort("Input is too long", 400)})
    assert getattr(scheduler, DOOR)(req) is False
    assert scheduler.log == []


def test_health_check_is_admitted_on_a_full_server(admission, upstream):
    scheduler = _full(admission, upstream)
    probe = FakeReq("HEALTH_CHECK_1", 1, bootstrap_host=upstream.FAKE_BOOTSTRAP_HOST, bootstrap_room=0)
    assert getattr(scheduler, DOOR)(probe) is False
    assert scheduler.log == []


def test_decode_server_never_refuses(admission, upstream):
    scheduler = _full(admission, upstream, mode="decode")
    assert getattr(scheduler, DOOR)(FakeReq("new", 10_000)) is False
    assert scheduler.log == []


def test_no_limits_never_refuse(admission, upstream):
    scheduler = _full(admission, upstream, max_requests=None, max_tokens=None)
    assert getattr(scheduler, DOOR)(FakeReq("new", 10**6)) is False
    assert scheduler.log == []


# --- the refused request's decode half ---------------------------------------------------------


def _refused(admission, upstream, *rooms):
    scheduler = _scheduler(admission, upstream)
    _fill(scheduler, waiting=32)
    senders = []
    for room in rooms:
        req = FakeReq(f"r{room}", 10, bootstrap_room=room)
        assert getattr(scheduler, DOOR)(req) is True
        senders.append(req.disagg_kv_sender)
    scheduler.log.clear()
    return scheduler, senders


def test_decode_half_is_failed_once_it_publishes_its_destination(admission, upstream):
    poll = upstream.KVPoll
    scheduler, [sender] = _refused(admission, upstream, 9)
    reason = scheduler.disagg_prefill_refused[0].reason
    sender.polls = [poll.Bootstrapping, poll.WaitingForInput]

    getattr(scheduler, RESOLVE)()
    assert scheduler.log == [] and len(scheduler.disagg_prefill_refused) == 1

    getattr(scheduler, RESOLVE)()
    assert scheduler.log == [("conclude_failure", 9, reason), ("clear", 9)]
    assert scheduler.disagg_prefill_refused == []


def test_failed_room_is_cleared_without_a_message(admission, upstream):
    # Decode aborted its half (AbortNotification) or the bootstrap timed out: nothing to tell.
    scheduler, [sender] = _refused(admission, upstream, 4)
    sender.polls = [upstream.KVPoll.Failed]
    getattr(scheduler, RESOLVE)()
    assert scheduler.log == [("clear", 4)]
    assert scheduler.disagg_prefill_refused == []


def test_each_refused_half_is_resolved_on_its_own(admission, upstream):
    poll = upstream.KVPoll
    scheduler, senders = _refused(admission, upstream, 1, 2, 3)
    for sender, status in zip(senders, (poll.WaitingForInput, poll.Bootstrapping, poll.Failed), strict=True):
        sender.polls = [status]
    getattr(scheduler, RESOLVE)()
    assert [entry[:2] for entry in scheduler.log] == [("conclude_failure", 1), ("clear", 1), ("clear", 3)]
    assert [half.sender for half in scheduler.disagg_prefill_refused] == [senders[1]]


def test_a_refused_sender_is_never_initialised_nor_sent_to(admission, upstream):
    """Why a refused sender reports only Bootstrapping, WaitingForInput or Failed: upstream moves a
    room to Transferring or Success only for chunks queued by send() (CommonKVSender._poll_with_status
    turns only a Success room into Transferring), and the door and the resolver never init() or send()."""
    poll = upstream.KVPoll
    scheduler, senders = _refused(admission, upstream, 1, 2, 3)
    for sender, states in zip(
        senders,
        ([poll.Bootstrapping, poll.WaitingForInput], [poll.Failed], [poll.Bootstrapping, poll.Failed]),
        strict=True,
    ):
        sender.polls = states
    getattr(scheduler, RESOLVE)()
    getattr(scheduler, RESOLVE)()
    assert scheduler.disagg_prefill_refused == []
    assert not [entry for entry in scheduler.log if entry[0] in ("sender.init", "sender.send")], scheduler.log


def test_resolution_names_only_the_reachable_states(patched_tree):
    """The resolver branches on exactly the states a refused sender can report: Bootstrapping (wait),
    WaitingForInput (tell decode), and Failed by elimination (clear). No branch stands for
    Transferring or Success, which it cannot reach (test above)."""
    tree = ast.parse(patched_tree.joinpath(*SRT, "disaggregation", "admission.py").read_text(encoding="utf-8"))
    _, method = _method(tree, MIXIN, RESOLVE)
    tests = [ast.unparse(node.test) for node in ast.walk(method) if isinstance(node, ast.If)]
    assert tests == [
        "not self.disagg_prefill_refused",
        "poll == KVPoll.Bootstrapping",
        "poll == KVPoll.WaitingForInput",
    ]


# --- startup -----------------------------------------------------------------------------------


def test_negative_token_cap_is_refused_at_startup(admission, upstream):
    with pytest.raises(ValueError, match="--max-queued-tokens must be >= 0, got -1"):
        _scheduler(admission, upstream, max_tokens=-1)


def test_zero_token_cap_admits_only_into_an_empty_queue(admission, upstream):
    """--max-queued-tokens 0 is valid: a request is admitted only when no input tokens wait."""
    try:
        scheduler = _scheduler(admission, upstream, max_requests=None, max_tokens=0)
    except ValueError as exc:
        pytest.fail(f"--max-queued-tokens 0 must be accepted at startup: {exc}")
    assert scheduler.max_queued_tokens == 0
    assert getattr(scheduler, DOOR)(FakeReq("first", 50_000)) is False
    scheduler.waiting_queue.append(FakeReq("first", 50_000))
    assert getattr(scheduler, DOOR)(FakeReq("second", 1)) is True
    message = scheduler.log[1][1].finished_reason["message"]
    assert message == (
        "The prefill queue is full: 50000 input tokens are waiting for prefill (bootstrap + waiting "
        "queues and the chunked request), and this request's 1 would pass --max-queued-tokens 0. Retry later."
    )


def test_priority_does_not_evict_on_a_prefill_server(admission, upstream, caplog):
    """Unlike the colocated rule with --enable-priority-scheduling, a full prefill server refuses the
    new request whatever its priority and evicts nothing: queued requests have decode halves."""
    with caplog.at_level(logging.WARNING):
        scheduler = _scheduler(admission, upstream, priority=True, max_tokens=None)
    [record] = caplog.records
    assert record.getMessage() == (
        "--enable-priority-scheduling does not evict queued requests on a PD prefill server: a new "
        "request beyond --max-queued-requests / --max-queued-tokens is refused whatever its priority, "
        "since a queued request already has a decode half that would have to be freed."
    )
    _fill(scheduler, waiting=RECOMMENDED_REQUESTS)
    queued = list(scheduler.waiting_queue)
    urgent = FakeReq("urgent", 10)
    urgent.priority = -(10**6)
    assert getattr(scheduler, DOOR)(urgent) is True
    assert scheduler.waiting_queue == queued
    assert [entry[2] for entry in scheduler.log if entry[0] == "send_abort_output"] == ["urgent"]


def test_limits_are_per_scheduler_that_is_per_dp_rank(admission, upstream):
    """Each scheduler (one per DP-attention rank) counts only its own queues, as the colocated
    limit does: a full rank refuses while another rank of the same server admits."""
    full_rank = _scheduler(admission, upstream, max_tokens=None)
    idle_rank = _scheduler(admission, upstream, max_tokens=None)
    _fill(full_rank, waiting=RECOMMENDED_REQUESTS)
    assert getattr(full_rank, DOOR)(FakeReq("a", 10)) is True
    assert getattr(idle_rank, DOOR)(FakeReq("b", 10)) is False


def test_token_cap_field_takes_the_last_position_without_a_field_order_line(patched_tree):
    """0004 does not touch field_order.py, so it applies alone on the pin (0001 appends its own
    field there): upstream's collect_input_fields puts an unlisted field after every listed one,
    which is where appending it would have put it. Runs upstream's collect_input_fields with a
    stand-in for msgspec's struct introspection (not installed here)."""
    srt = patched_tree.joinpath(*SRT, "arg_groups")
    source = srt.joinpath("field_order.py").read_text(encoding="utf-8")
    order = ast.literal_eval(
        next(
            n.value
            for n in ast.parse(source).body
            if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "POSITIONAL_FIELD_ORDER"
        )
    )
    assert "max_queued_tokens" not in order

    nodefault = object()

    def fields(cls):
        return [
            types.SimpleNamespace(
                name=f.name,
                default=nodefault if f.default is dataclasses.MISSING else f.default,
                default_factory=nodefault,
            )
            for f in dataclasses.fields(cls)
        ]

    msgspec = types.SimpleNamespace(NODEFAULT=nodefault, structs=types.SimpleNamespace(fields=fields))
    init = srt.joinpath("fields", "__init__.py").read_text(encoding="utf-8")
    collect = next(
        n for n in ast.parse(init).body if isinstance(n, ast.FunctionDef) and n.name == "collect_input_fields"
    )
    ns: dict[str, Any] = {
        "POSITIONAL_FIELD_ORDER": order,
        "msgspec": msgspec,
        "get_type_hints": typing.get_type_hints,
        "Any": Any,
        "Dict": dict,
        "List": list,
        "Tuple": tuple,
    }
    exec(compile(ast.Module(body=[collect], type_ignores=[]), "<fields>", "exec"), ns)

    # the token cap is declared in Schedule beside max_queued_requests, not at the end of a class
    @dataclasses.dataclass
    class Schedule:
        _NS_PATH: typing.ClassVar[str] = "schedule"
        max_queued_requests: int | None = None
        max_queued_tokens: int | None = None
        max_running_requests: int | None = None

    @dataclasses.dataclass
    class Last:
        _NS_PATH: typing.ClassVar[str] = "last"
        return_aux_hidden_state_layer_ids: int | None = None

    hints, _, _ = ns["collect_input_fields"]([Schedule, Last])
    assert list(hints)[-1] == "max_queued_tokens"
    assert list(hints).index("max_queued_requests") < list(hints).index("max_queued_tokens")
    schedule = srt.joinpath("fields", "schedule.py").read_text(encoding="utf-8")
    assert re.search(r"^    max_queued_tokens: A\[", schedule, re.M)


def test_decode_server_says_it_ignores_the_limits(admission, upstream, caplog):
    with caplog.at_level(logging.WARNING):
        _scheduler(admission, upstream, mode="decode")
    [record] = caplog.records
    for needle in ("--max-queued-requests and --max-queued-tokens", "prefill server"):
        assert needle in record.getMessage(), record.getMessage()


def test_colocated_server_says_it_ignores_the_token_cap(admission, upstream, caplog):
    with caplog.at_level(logging.WARNING):
        _scheduler(admission, upstream, mode="null")
    [record] = caplog.records
    assert "--max-queued-tokens" in record.getMessage()


def test_prefill_server_starts_quietly(admission, upstream, caplog):
    with caplog.at_level(logging.WARNING):
        scheduler = _scheduler(admission, upstream)
    assert caplog.records == []
    assert scheduler.max_queued_tokens == EXAMPLE_TOKENS
    assert scheduler.disagg_prefill_refused == []


# --- where the scheduler calls it --------------------------------------------------------------


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


def _method(tree, cls, name):
    klass = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == cls)
    return klass, next(node for node in klass.body if isinstance(node, ast.FunctionDef) and node.name == name)


@pytest.fixture(scope="module")
def scheduler_ast(patched_tree):
    path = patched_tree.joinpath(*SRT, "managers", "scheduler.py")
    return ast.parse(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def add_request_branches(scheduler_ast):
    _, method = _method(scheduler_ast, "Scheduler", "_add_request_to_queue")
    branches = {}
    for node in ast.walk(method):
        if isinstance(node, ast.If):
            mode = _mode_of(node.test)
            if mode is not None:
                branches[mode] = node.body
    return branches


def test_scheduler_has_the_admission_mixin(scheduler_ast):
    klass, _ = _method(scheduler_ast, "Scheduler", "_add_request_to_queue")
    assert MIXIN in [getattr(base, "id", None) for base in klass.bases]


def test_prefill_branch_checks_before_prefetch_and_queue(add_request_branches):
    body = add_request_branches["PREFILL"]
    [door] = _calls(body, DOOR)
    assert door.lineno < min(call.lineno for call in _calls(body, "_prefetch_kvcache"))
    assert door.lineno < min(call.lineno for call in _calls(body, "add"))


def test_decode_branch_admits_everything(add_request_branches):
    assert not _calls(add_request_branches["DECODE"], DOOR)


def test_null_branch_keeps_upstream_check(add_request_branches):
    assert _calls(add_request_branches["NULL"], "_abort_on_queued_limit")


def test_init_disaggregation_reads_the_token_cap(scheduler_ast):
    _, method = _method(scheduler_ast, "Scheduler", "init_disaggregation")
    [call] = _calls([method], "init_disagg_admission")
    assert ast.unparse(call.args[0]) == "get_schedule().max_queued_tokens"


def test_every_prefill_loop_resolves_refused_halves(patched_tree):
    # pop_bootstrapped runs on every pass of the normal, overlap and PP prefill loops.
    tree = ast.parse(patched_tree.joinpath(*SRT, "disaggregation", "prefill.py").read_text(encoding="utf-8"))
    _, method = _method(tree, "PrefillBootstrapQueue", "pop_bootstrapped")
    [call] = _calls([method], RESOLVE)
    assert ast.unparse(call.func) == f"self.scheduler.{RESOLVE}"
    first_return = min(node.lineno for node in ast.walk(method) if isinstance(node, ast.Return))
    assert call.lineno < first_return


def _help(patched_tree, field_name):
    path = patched_tree.joinpath(*SRT, "arg_groups", "fields", "schedule.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    texts = [
        node.value
        for stmt in ast.walk(tree)
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == field_name
        for node in ast.walk(stmt.annotation)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    assert texts, f"{field_name} has no help text"
    return " ".join(texts)


def test_help_says_where_the_request_cap_is_enforced(patched_tree):
    text = _help(patched_tree, "max_queued_requests")
    assert "ignored when using disaggregation-mode" not in text, text
    for needle in (
        "enforced on the prefill server",
        "decode half",
        "a decode server ignores it",
        "each DP rank counts and limits its own queues",
        "refused whatever its priority",
        # issue 32: what a client behind a router may receive, what the limits do not bound, and
        # the behaviour change for PD deployments that pass the flag today
        "decode half fails with 500",
        "a client may get that 500 instead of the 503",
        "only under the default early decode allocation policy without optimistic prefill",
        "Existing PD deployments that pass this flag start refusing requests at prefill",
    ):
        assert needle in text, (needle, text)


def test_token_cap_flag_exists_with_its_help(patched_tree):
    text = _help(patched_tree, "max_queued_tokens")
    for needle in (
        "input tokens waiting for prefill",
        "503",
        "admitted whatever its length, so 0 admits a request only when no input tokens are waiting",
        "each DP rank limits its own queues",
        "whole prompt, not the part a HiCache or radix prefix hit leaves to compute",
        "does not bound decode's backlog",
        "A decode server and a colocated server ignore it, with a warning",
    ):
        assert needle in text, (needle, text)
