"""Deterministic real agents for the replay tests and fixtures.

Three agents, each making one model turn with three parallel tool calls, then a
final answer:

- ``plain``: a plain-Python loop speaking the OpenAI chat-completions format
  through ``run.complete`` and ``run.acall_tool``;
- ``sdk``: an OpenAI Agents SDK agent (``Runner.run``) whose model is a scripted
  implementation of the SDK's ``Model`` interface;
- ``langgraph``: a LangGraph ReAct agent whose model is a ``langchain-core`` fake
  chat model that emits tool calls.

The tools sleep for different times, so that the three calls complete in an
order (3, 1, 2) different from the order they were requested in; ``reverse=True``
flips the delays. ``change`` alters the agent's own code path:
``"argument"`` adds an argument to the second tool call (a divergence at step
``<model>.2``), ``"prompt"`` changes the system prompt (a divergence at the
first model call).
"""

from __future__ import annotations

import asyncio
import copy
import json
import warnings
from typing import Any

CITIES = [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Oslo", "utc_offset": 1}),
          ("get_weather", {"city": "Lima"})]
DELAYS = {"Paris": 0.02, "Oslo": 0.03, "Lima": 0.0}
QUESTION = "Weather in Paris and Lima, time in Oslo?"
SYSTEM = "You are a concise travel assistant."
FINAL = "Sunny in Paris and Lima; 12:01 in Oslo."
MODEL = "gpt-4o-2024-08-06"


class Tools:
    """Weather and time tools that sleep (to reorder completions) and count invocations."""

    def __init__(self, reverse: bool = False) -> None:
        self.invoked: list[tuple[str, str]] = []
        self.reverse = reverse

    async def _sleep(self, city: str) -> None:
        delay = DELAYS.get(city, 0.0)
        await asyncio.sleep(0.03 - delay if self.reverse else delay)

    async def get_weather(self, city: str) -> str:
        await self._sleep(city)
        self.invoked.append(("get_weather", city))
        return f"Sunny in {city}"

    async def get_time(self, city: str, utc_offset: int = 0) -> str:
        await self._sleep(city)
        self.invoked.append(("get_time", city))
        return f"12:{utc_offset:02d} in {city}"


def _arguments(i: int, args: dict[str, Any], change: str | None) -> dict[str, Any]:
    args = dict(args)
    if change == "argument" and i == 2:
        args["utc_offset"] = 2
    return args


# --------------------------------------------------------------------------- plain chat-completions loop


TOOL_SPECS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather for a city.",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Local time in a city.",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string"}, "utc_offset": {"type": "integer"}},
                                          "required": ["city"]}}},
]


def chat_script() -> list[dict[str, Any]]:
    """The two chat-completions responses the scripted model returns."""
    calls = [{"id": f"call_{i}", "type": "function",
              "function": {"name": name, "arguments": json.dumps(args)}} for i, (name, args) in enumerate(CITIES, 1)]
    return [
        {"id": "chatcmpl-1", "object": "chat.completion", "model": MODEL,
         "choices": [{"index": 0, "finish_reason": "tool_calls",
                      "message": {"role": "assistant", "content": None, "tool_calls": calls}}],
         "usage": {"prompt_tokens": 50, "completion_tokens": 30, "total_tokens": 80}},
        {"id": "chatcmpl-2", "object": "chat.completion", "model": MODEL,
         "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": FINAL}}],
         "usage": {"prompt_tokens": 90, "completion_tokens": 12, "total_tokens": 102}},
    ]


class ScriptedChat:
    """Stands in for ``client.chat.completions.create``: returns the script in order."""

    def __init__(self) -> None:
        self.responses = chat_script()
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(copy.deepcopy(request))
        return self.responses.pop(0)


def plain_agent(tools: Tools | None = None, chat: ScriptedChat | None = None, change: str | None = None):
    """The plain-Python agent loop, as a replayable ``agent(run)`` coroutine function."""
    tools = tools or Tools()
    chat = chat or ScriptedChat()
    fns = {"get_weather": tools.get_weather, "get_time": tools.get_time}

    from sealbox.recorder import ToolDenied

    async def agent(run: Any) -> str:
        system = SYSTEM + (" Answer in French." if change == "prompt" else "")
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": QUESTION}]
        while True:
            response = run.complete({"model": MODEL, "messages": messages, "tools": TOOL_SPECS}, chat)
            message = response["choices"][0]["message"]
            messages.append(message)
            if not message.get("tool_calls"):
                return message["content"]

            async def one(i: int, tc: dict[str, Any]) -> tuple[str, Any]:
                name = tc["function"]["name"]
                args = _arguments(i, json.loads(tc["function"]["arguments"]), change)
                try:
                    return tc["id"], await run.acall_tool("local", name, args, fns[name], call_id=tc["id"])
                except ToolDenied as denied:
                    return tc["id"], f"Error: {denied}"

            done = await asyncio.gather(*(one(i, tc) for i, tc in enumerate(message["tool_calls"], 1)))
            messages += [{"role": "tool", "tool_call_id": cid, "content": out} for cid, out in done]

    return agent


# --------------------------------------------------------------------------- OpenAI Agents SDK


def sdk_agent(tools: Tools | None = None, change: str | None = None):
    """An OpenAI Agents SDK agent (scripted ``Model``), as a replayable ``agent(run)``."""
    from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from sealbox.integrations.openai_agents import instrument

    set_tracing_disabled(True)
    tools = tools or Tools()

    def script() -> list[ModelResponse]:
        calls = [ResponseFunctionToolCall(id=f"fc_{i}", call_id=f"call_{i}", type="function_call", name=name,
                                          arguments=json.dumps(args), status="completed")
                 for i, (name, args) in enumerate(CITIES, 1)]
        final = ResponseOutputMessage(id="msg_final", type="message", role="assistant", status="completed",
                                      content=[ResponseOutputText(type="output_text", text=FINAL, annotations=[])])
        return [ModelResponse(output=calls, usage=Usage(requests=1, input_tokens=50, output_tokens=30,
                                                        total_tokens=80), response_id="resp_1"),
                ModelResponse(output=[final], usage=Usage(requests=1, input_tokens=90, output_tokens=12,
                                                          total_tokens=102), response_id="resp_2")]

    class ScriptedModel(Model):
        def __init__(self) -> None:
            self.responses = script()
            self.model = MODEL

        async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                               tracing, *, previous_response_id=None, conversation_id=None, prompt=None):
            return self.responses.pop(0)

        def stream_response(self, *args, **kwargs):  # pragma: no cover - not used
            raise NotImplementedError

    @function_tool
    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        return await tools.get_weather(city)

    @function_tool
    async def get_time(city: str, utc_offset: int = 0) -> str:
        """Local time in a city."""
        return await tools.get_time(city, utc_offset)

    async def agent(run: Any) -> str:
        instructions = SYSTEM + (" Answer in French." if change == "prompt" else "")
        base = Agent(name="travel", instructions=instructions, model=ScriptedModel(), tools=[get_weather, get_time],
                     model_settings=ModelSettings(parallel_tool_calls=True))
        result = await Runner.run(instrument(run, base), QUESTION)
        return result.final_output

    return agent


# --------------------------------------------------------------------------- LangGraph


def langgraph_agent(tools: Tools | None = None, change: str | None = None):
    """A LangGraph ReAct agent with a fake chat model, as a replayable ``agent(run)``."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import StructuredTool
    from langchain_core.utils.function_calling import convert_to_openai_tool

    from sealbox.integrations.langgraph import SealboxCallbackHandler, governed_tools

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

    tools = tools or Tools()

    class ScriptedChatModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def script() -> list[AIMessage]:
        return [
            AIMessage(content="", id="ai-1", tool_calls=[{"name": n, "args": a, "id": f"call_{i}"}
                                                         for i, (n, a) in enumerate(CITIES, 1)],
                      usage_metadata={"input_tokens": 50, "output_tokens": 30, "total_tokens": 80}),
            AIMessage(content=FINAL, id="ai-2",
                      usage_metadata={"input_tokens": 90, "output_tokens": 12, "total_tokens": 102}),
        ]

    async def get_weather(city: str) -> str:
        """Current weather for a city."""
        return await tools.get_weather(city)

    async def get_time(city: str, utc_offset: int = 0) -> str:
        """Local time in a city."""
        return await tools.get_time(city, utc_offset)

    lc_tools = [StructuredTool.from_function(coroutine=get_weather, name="get_weather"),
                StructuredTool.from_function(coroutine=get_time, name="get_time")]

    async def agent(run: Any) -> str:
        prompt = SYSTEM + (" Answer in French." if change == "prompt" else "")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = create_react_agent(ScriptedChatModel(messages=iter(script())), governed_tools(run, lc_tools),
                                       prompt=prompt)
        state = await graph.ainvoke({"messages": [("user", QUESTION)]},
                                    config={"callbacks": [SealboxCallbackHandler(run)]})
        return state["messages"][-1].content

    return agent


AGENTS = {"plain": plain_agent, "sdk": sdk_agent, "langgraph": langgraph_agent}


# --------------------------------------------------------------------------- entry points for `sealbox replay --agent`


def plain(run: Any) -> Any:
    """``sealbox replay RUN --agent replay_agents:plain``."""
    return plain_agent()(run)


def plain_changed(run: Any) -> Any:
    """The plain agent with a changed argument to its second tool call (diverges at step 2.2)."""
    return plain_agent(change="argument")(run)


def broken(run: Any) -> Any:
    """An agent that fails before its first step: ``sealbox replay`` reports its exception."""
    raise RuntimeError("my agent is broken")


def broken_loudly(run: Any) -> Any:
    """An agent whose exception message holds terminal control sequences (clear screen, retitle)."""
    raise RuntimeError("\x1b[2J\x1b]0;pwned\x07my agent is broken")


def sdk(run: Any) -> Any:
    """``sealbox replay RUN --agent replay_agents:sdk``."""
    return sdk_agent()(run)


def langgraph(run: Any) -> Any:
    """``sealbox replay RUN --agent replay_agents:langgraph``."""
    return langgraph_agent()(run)


async def record(store: Any, kind: str, *, policy: Any = None, snapshot: Any = None, tools: Tools | None = None) -> str:
    """Record one run of an agent; return its run id."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    async with Recorder(store, policy=policy or ALLOW_ALL).run(agent=kind, snapshot=snapshot) as run:
        await AGENTS[kind](tools=tools)(run)
    return run.run_id


def record_unknown_outcome(store: Any) -> str:
    """A run that died while its first tool call ran: the call is allowed and has no result."""
    from sealbox.policies import ALLOW_ALL
    from sealbox.recorder import Recorder

    run = Recorder(store, policy=ALLOW_ALL).run(agent="plain").start()
    run.model_call({"model": MODEL, "messages": [{"role": "system", "content": SYSTEM},
                                                 {"role": "user", "content": QUESTION}], "tools": TOOL_SPECS},
                   chat_script()[0])
    run._decide_and_record("local", "get_weather", {"city": "Paris"}, None, "call_1", None)
    return run.run_id  # no tool.result, no run.ended: the process "died" here


def exits(run: Any) -> Any:
    """An agent that calls sys.exit(3) before its first step."""
    raise SystemExit(3)


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise ValueError("str fails")


def unprintable(run: Any) -> Any:
    """An agent whose exception cannot be turned into text."""
    raise _Unprintable()


def verbose(run: Any) -> Any:
    """An agent whose exception message is 5,000 characters long."""
    raise RuntimeError("x" * 5000)


def delegating(run: Any, to: str = "ceo@example.com") -> Any:
    """An agent that hands its e-mail to a sub-agent's run (``mailer``), then notes it is done."""
    with run.recorder.run(agent="mailer", principal="agent:mailer") as sub:
        sub.call_tool("mail", "send", {"to": to}, lambda to: f"sent to {to}")
    run.note("done")


def delegating_changed(run: Any) -> Any:
    """``delegating`` whose sub-agent e-mails someone else."""
    delegating(run, to="everyone@example.com")
