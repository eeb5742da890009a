#!/usr/bin/env python3
"""Renders tool conversations with the reference Jinja chat templates, as
transformers' apply_chat_template does (jinja2 sandbox, trim_blocks,
lstrip_blocks, loopcontrols, tojson = json.dumps(ensure_ascii=False)), into
tests/data/chat_tools_golden.jsonl for tests/test_chat.c.

    python3 scripts/chat_golden.py ../shared > tests/data/chat_tools_golden.jsonl

It first renders the conversations of ../shared/tokenizers/*/chat_template_golden.jsonl
and stops unless every one comes out byte for byte, so the environment is
known to be the one those goldens were made with. Needs jinja2 (3.1)."""
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def env():
    e = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    e.filters["tojson"] = tojson
    e.globals["raise_exception"] = raise_exception
    return e


def render(tmpl, messages, options):
    kw = dict(options)
    return tmpl.render(messages=messages, tools=kw.pop("tools", None),
                       add_generation_prompt=kw.pop("add_generation_prompt", False), **kw)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
        "where": {"type": "object"}, "hours": {"type": "array"}}, "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def conversations():
    user = {"role": "user", "content": "Weather in Zürich for 2 days?"}
    args = {"city": "Zürich", "days": 2, "metric": True, "where": {"lat": 47.37, "lon": 8.54, "tz": None},
            "hours": [6, 12]}
    turn1 = {"role": "assistant", "content": "Let me check.", "tool_calls": [call("call_a1", "get_weather", args)]}
    result = {"role": "tool", "tool_call_id": "call_a1", "content": "{\"temp\": 21, \"sky\": \"clear <sunny>\"}"}
    answer = {"role": "assistant", "content": "It is 21 °C and clear."}
    follow = {"role": "user", "content": "And in Bern?"}
    tools = [WEATHER, SEARCH]
    yield "two_turn_tool_answer", [user, turn1, result, answer, follow], {"add_generation_prompt": True, "tools": tools}
    yield "two_turn_tool_pending", [user, turn1, result], {"add_generation_prompt": True, "tools": tools}
    think = dict(turn1, content="", reasoning_content="The user wants weather.")
    yield "tool_call_reasoning", [user, think, result], {"add_generation_prompt": True, "tools": tools}
    par = {"role": "assistant", "content": "", "tool_calls": [
        call("call_b1", "get_weather", {"city": "Bern"}), call("call_b2", "search", {"query": "Bern \"events\" <today>"})]}
    res2 = [{"role": "tool", "tool_call_id": "call_b1", "content": "rain"},
            {"role": "tool", "tool_call_id": "call_b2", "content": "[]"}]
    yield "parallel_then_answer", [{"role": "system", "content": "Be brief."}, user, par] + res2 + [
        {"role": "assistant", "content": "Rain, no events."}], {"add_generation_prompt": True, "tools": tools,
                                                                  "enable_thinking": False}


def main():
    shared = sys.argv[1] if len(sys.argv) > 1 else "../shared"
    e = env()
    templates = {
        "qwen3": e.from_string(json.load(open(f"{shared}/tokenizers/qwen3/tokenizer_config.json"))["chat_template"]),
        "qwen35": e.from_string(open(f"{shared}/tokenizers/qwen35/chat_template.jinja").read()),
    }
    for name, t in templates.items():
        for line in open(f"{shared}/tokenizers/{name}/chat_template_golden.jsonl"):
            d = json.loads(line)
            if render(t, d["messages"], d["options"]) != d["rendered"]:
                sys.exit(f"{name}/{d['name']}: this environment does not reproduce the shared golden")
    for name, t in templates.items():
        for cname, messages, options in conversations():
            out = {"template": name, "name": cname, "messages": messages, "options": options,
                   "rendered": render(t, messages, options)}
            print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()
