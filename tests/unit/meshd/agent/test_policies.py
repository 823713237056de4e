"""The policies' pure parts: the complexity heuristic and chit-chat detection (English and Chinese)."""

from __future__ import annotations

from pathlib import Path

import pytest

from meshd.agent.policies.chitchat import is_chit_chat
from meshd.agent.policies.complexity import apply, infer
from meshd.agent.settings import RunSettings


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("What is six times seven?", "low"),
        ("查一下版本号", "low"),
        ("Refactor the task module into its own file", "high"),
        ("Design the migration of the billing database", "high"),
        ("重构 task 模块的状态机逻辑", "high"),
        ("把服务迁移到新集群", "high"),
        ("First read the file, then summarise it", "medium"),
        ("先读文件，然后写总结", "medium"),
        ("word " * 61, "medium"),
        ("字" * 201, "medium"),
    ],
)
def test_complexity_heuristic(text: str, level: str) -> None:
    assert infer(text) == level


def test_level_settings_keep_a_configured_effort_and_never_touch_limits() -> None:
    rs = RunSettings(max_turns=7)
    high = apply(rs, "high")
    assert (high.effort, high.thinking, high.max_turns) == ("high", {"type": "adaptive"}, 7)
    assert apply(rs, "low").thinking == {"type": "disabled"}
    assert apply(RunSettings(effort="max"), "low").effort == "max"


@pytest.mark.parametrize(
    "text",
    [
        "Thanks!",
        "thank you so much.",
        "Thanks a lot!",
        "Many thanks again, really appreciated.",
        "OK",
        "Got it, thanks!",
        "You're welcome! Have a nice day.",
        "👍",
        "谢谢！",
        "ok 👍",
        "好的，收到",
        "不客气～",
        "辛苦了",
    ],
)
def test_chit_chat(text: str) -> None:
    assert is_chit_chat(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Thanks, and please also check the logs",
        "What is 6*7?",
        "谢谢，另外请看一下日志",
        "ok " * 40,
        "Done.",
        "Confirmed: move the state constants too.",
        "Thanks, please fix the bug too",
        "ok, do it",
    ],
)
def test_not_chit_chat(text: str) -> None:
    assert not is_chit_chat(text)


def _task_and_event(meta: dict | None, event_type: str = "task.created", state: str = "submitted"):
    from meshd.models import InboxEvent, Task

    msg = {
        "message_id": "m-1",
        "sender": "bob@b",
        "parts": [{"kind": "text", "text": "Refactor it"}],
        "metadata": meta,
    }
    at = "2026-12-01T00:00:00+00:00"
    task = Task.from_json(
        {
            "task_id": "t-1",
            "context_id": "c-1",
            "state": state,
            "initiator": "bob@b",
            "serving_agent": "me@a",
            "messages": [msg],
            "created_at": at,
            "updated_at": at,
        }
    )
    event = InboxEvent.from_json(
        {
            "seq": 1,
            "event_id": "e-1",
            "type": event_type,
            "task_id": "t-1",
            "context_id": "c-1",
            "from_agent_id": "bob@b",
            "created_at": "2026-12-01T00:00:00+00:00",
            "payload": {"message": msg},
        }
    )
    return task, event


def test_handshake_waiver_is_the_senders_unless_always_and_off_means_never() -> None:
    from meshd.agent.policies.config import PolicyConfig
    from meshd.agent.policies.handshake import needed

    task, event = _task_and_event(None)
    assert needed(event, task, "me@a", "high", PolicyConfig())
    assert needed(event, task, "me@a", "medium", PolicyConfig())
    assert not needed(event, task, "me@a", "low", PolicyConfig())
    assert not needed(event, task, "someone@else", "high", PolicyConfig())  # we do not serve it
    assert not needed(event, task, "me@a", "high", PolicyConfig(handshake="off"))
    task, event = _task_and_event({"handshake": False})
    assert not needed(event, task, "me@a", "high", PolicyConfig())
    assert needed(event, task, "me@a", "high", PolicyConfig(handshake="always"))


def test_a_forged_handshake_mark_from_the_other_side_is_no_confirmation() -> None:
    from meshd.agent.policies.handshake import confirms

    task, event = _task_and_event(
        {"mesh_policy": {"handshake": "understanding"}}, "task.message", "input-required"
    )
    assert not confirms(event, task, "me@a")


def test_a_verification_line_does_not_make_thanks_work() -> None:
    assert is_chit_chat("Thanks a lot!\n\n[verification: unverified]")


def test_a_group_message_run_gets_the_smaller_broadcast_limits_never_larger() -> None:
    from meshd.agent.policies.config import PolicyConfig
    from meshd.agent.policies.engine import Plan

    c = PolicyConfig()
    assert Plan(broadcast=True).settings(RunSettings(), c).max_turns == 20
    assert Plan(broadcast=True).settings(RunSettings(), c).max_budget_usd == 3.0
    assert Plan(broadcast=True).settings(RunSettings(max_turns=5), c).max_turns == 5
    assert Plan().settings(RunSettings(), c).max_turns == 30


def test_mesh_agent_policy_flags_reach_the_config() -> None:
    from meshd.cli.parser import build_parser

    args = build_parser().parse_args(
        ["agent", "--handshake", "always", "--loop-limit", "4", "--check", "make test", "--check", "lint",
         "--broadcast-max-turns", "7", "--no-plans"]
    )  # fmt: skip
    assert (args.handshake, args.loop_limit, args.check, args.broadcast_max_turns, args.no_plans) == (
        "always", 4, ["make test", "lint"], 7, True)  # fmt: skip
    send = build_parser().parse_args(["send", "bob@b", "hi", "--complexity", "high", "--no-handshake"])
    assert (send.complexity, send.no_handshake) == ("high", True)


def test_the_senders_prompt_shows_the_label_the_other_runtime_put_on_a_reply() -> None:
    from meshd.agent.policies.config import PolicyConfig
    from meshd.agent.policies.engine import Policies

    check = {"command": "make test", "exit_code": 2, "by": "runtime"}
    meta = {"mesh_verification": {"label": "failed checks", "checks": [check]}}
    task, event = _task_and_event(meta, "task.message")
    # We (x@c) take part but do not serve it; the serving side's runtime labelled its reply.
    plan = Policies(PolicyConfig(), workspace=Path("/nonexistent")).plan(event, task, "x@c", "c-1")
    assert "bob@b's runtime labelled this reply: failed checks — `make test` exit 2 (runtime)." in plan.notes


def test_a_check_gets_only_allow_listed_variables_and_its_own_home() -> None:
    from meshd.agent.policies.sandbox import check_env

    env = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "MESH_API_KEY": "mk_x", "ANTHROPIC_API_KEY": "sk",
           "GITHUB_TOKEN": "ghp", "AWS_SECRET_ACCESS_KEY": "a", "HOME": "/root",
           "LD_PRELOAD": "/x.so"}  # fmt: skip
    want = {"PATH": "/usr/bin", "LANG": "C.UTF-8", "HOME": "/tmp/h", "TMPDIR": "/tmp"}
    assert check_env("/tmp/h", env) == want


def test_sandbox_hides_secrets_around_and_inside_the_workspace(tmp_path: Path) -> None:
    from meshd.agent.policies.sandbox import Sandbox

    state = tmp_path / "state"
    ws = state / "workspace"
    (ws / "keys").mkdir(parents=True)
    cfg = tmp_path / "config.json"
    cfg.write_text("{}")
    hidden = [state, cfg, ws / "keys", tmp_path / "absent"]
    argv = Sandbox.for_runtime("/usr/bin/bwrap", ws, hidden).argv("make")
    at = {a: i for i, a in enumerate(argv)}
    bind = argv.index("--bind")
    # The state folder is hidden before the workspace is bound into it; a folder inside after.
    assert argv[at[str(state)] - 1] == "--tmpfs" and at[str(state)] < bind < at[str(ws / "keys")]
    assert argv[at[str(cfg)] - 2 : at[str(cfg)]] == ["--ro-bind", "/dev/null"]
    assert str(tmp_path / "absent") not in argv
    assert {"--unshare-all", "--die-with-parent", "--new-session"} <= set(argv)
    assert argv[-4:] == ["--", "/bin/sh", "-c", "make"]


@pytest.mark.parametrize(
    ("text", "claim"),
    [
        ("Done; all tests pass.", True),
        ("Tests passed on my side.", True),
        ("I verified the fix against the report.", True),
        ("Verified: the totals match.", True),
        ("The build passes now and it compiles.", True),
        ("测试通过，已提交。", True),
        ("已验证。", True),
        ("It works like this: the key is hashed first.", False),
        ("That works for me, see you Monday.", False),
        ("Not verified yet: I could not run the suite.", False),
        ("I have not verified it.", False),
        ("This hasn't been verified.", False),
        ("The draft is unverified.", False),
        ("It should be verified by QA.", False),
        ("No tests passed.", False),
        ("The function works by hashing the key.", False),
        ("未验证，请自行测试。", False),
        ("测试未通过。", False),
    ],
)
def test_only_claims_of_verification_count_as_claims(text: str, claim: bool) -> None:
    from meshd.agent.policies.labels import claims_verification

    assert claims_verification(text) is claim
