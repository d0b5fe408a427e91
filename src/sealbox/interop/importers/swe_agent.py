"""SWE-agent trajectories (``.traj``, JSON), both encodings of tool use (format ``swe-agent``).

One file is one run. The conversation comes from ``history`` (chat messages with
``message_type``); when a file has only ``trajectory``, the steps come from there.

- Function calling: an assistant message's ``tool_calls`` (OpenAI style) are the
  calls; a ``role: tool`` message answers the calls its ``tool_call_ids`` list names.
- Text actions: an assistant message without ``tool_calls`` whose ``action`` is a
  command (``ls -F``, ``edit 1:1\\n…\\nend_of_edit``) is one call: ``tool`` is the
  command's first word, ``arguments`` is ``{"action": <the whole command>}``; its
  result is the matching ``trajectory`` step's ``observation`` (with its
  ``execution_time`` as the duration), else the next observation message.
"""

from __future__ import annotations

from typing import Any

from sealbox.interop.importers.common import (
    ImportFormatError,
    RunBuilder,
    as_dict,
    as_list,
    as_str,
    lenient,
)
from sealbox.interop.importers.openai_messages import ChatConverter

FORMAT = "swe-agent"


def detect(doc: Any) -> bool:
    if not isinstance(doc, dict):
        return False
    hist = doc.get("history")
    if isinstance(hist, list) and hist and all(isinstance(m, dict) for m in hist[:20]):
        if any("message_type" in m or "agent" in m for m in hist[:20]) and all("role" in m for m in hist[:20]):
            return True
    traj = doc.get("trajectory")
    return isinstance(traj, list) and bool(traj) and all(
        isinstance(s, dict) and "action" in s and "observation" in s for s in traj[:20])


def _command(action: str) -> str:
    first = action.strip().split(None, 1)
    return first[0] if first else "unknown"


def _duration_us(value: Any) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and value >= 0:
        try:
            return int(value * 1_000_000)
        except OverflowError:
            return 0
    return 0


def parse(doc: Any, ctx: Any) -> list[RunBuilder]:
    if not detect(doc):
        raise ImportFormatError(f"{ctx.name} is not a SWE-agent trajectory (expected an object with a "
                                "'history' list of chat messages or a 'trajectory' list of steps)")
    info = as_dict(doc.get("info"))
    config = as_dict(lenient(doc.get("replay_config")))
    model = as_str(as_dict(as_dict(config.get("agent")).get("model")).get("name")) or "unknown"
    original: dict[str, Any] = {}
    for key in ("environment",):
        if as_str(doc.get(key)):
            original[key] = doc[key]
    instance = as_str(as_dict(as_dict(config.get("env")).get("deployment")).get("instance_id")) \
        or as_str(as_dict(config.get("problem_statement")).get("id"))
    if instance:
        original["instance_id"] = instance
    agent = "swe-agent"
    hist = as_list(doc.get("history"))
    for m in hist:
        if isinstance(m, dict) and as_str(m.get("agent")):
            agent = f"swe-agent:{m['agent']}" if m["agent"] != "main" else "swe-agent"
            break
    run = ctx.new_run(FORMAT, agent=agent, original_ids=original)
    traj = [s if isinstance(s, dict) else {} for s in as_list(doc.get("trajectory"))]
    if hist:
        _from_history(run, hist, traj, model)
    else:
        _from_trajectory(run, traj, model)
    status = as_str(info.get("exit_status"))
    if status is not None:
        run.end_info["exit_status"] = status
        if not status.startswith("submitted"):
            run.status = "error"
            run.error = {"type": "exit_status", "message": f"SWE-agent exit status: {status}"}
    if info:
        run.state(run.new_step(), info, "imported:info")  # submission (a diff), exit status, model stats
    return [run]


def _from_history(run: RunBuilder, hist: list[Any], traj: list[dict[str, Any]], model: str) -> None:
    conv = ChatConverter(run, model=model, where="history")
    text_steps = 0
    awaiting: str | None = None  # a text action waiting for its observation message
    text_actions = [m for m in hist if isinstance(m, dict) and m.get("role") == "assistant"
                    and not m.get("tool_calls") and isinstance(m.get("action"), str) and m["action"].strip()]
    use_traj = len(traj) == len(text_actions) and bool(traj)
    if text_actions and traj and not use_traj:
        run.anomaly("trajectory_mismatch", {"message": "history and trajectory differ in length; results "
                                            "taken from history", "actions": len(text_actions), "steps": len(traj)})
    for i, msg in enumerate(hist):
        if not isinstance(msg, dict):
            conv.feed(i, msg)
            continue
        if msg.get("role") == "assistant" and not msg.get("tool_calls") and isinstance(msg.get("action"), str) \
                and msg["action"].strip():
            action = msg["action"].rstrip("\n")
            _, ids = conv.assistant(i, msg, extra_calls=[(None, _command(action), {"action": action},
                                                          {"encoding": "text_action"})])
            awaiting = ids[0]
            if use_traj:
                step = traj[text_steps]
                conv.result(i, [awaiting], step.get("observation"), duration_us=_duration_us(step.get("execution_time")),
                            source={"trajectory_index": text_steps})
                awaiting = None
            text_steps += 1
            continue
        if awaiting and msg.get("role") in ("user", "tool") and msg.get("message_type", "observation") == "observation":
            conv.result(i, [awaiting], msg.get("content"))
            awaiting = None
            conv._pend(i, msg)
            continue
        conv.feed(i, msg)


def _from_trajectory(run: RunBuilder, traj: list[dict[str, Any]], model: str) -> None:
    conv = ChatConverter(run, model=model, where="trajectory")
    for i, step in enumerate(traj):
        action = step.get("action")
        if not isinstance(action, str) or not action.strip():
            run.anomaly("empty_action", {"where": f"trajectory[{i}]", "message": "a step has no action"})
            continue
        action = action.rstrip("\n")
        response = {k: step.get(k) for k in ("thought", "response", "action") if k in step}
        _, ids = conv.assistant(i, {"role": "assistant"}, response=response,
                                extra_calls=[(None, _command(action), {"action": action}, {"encoding": "text_action"})])
        conv.result(i, ids, step.get("observation"), duration_us=_duration_us(step.get("execution_time")),
                    source={"trajectory_index": i})
