#!/usr/bin/env python3
"""Renders every template of this folder over the conversations below with jinja2, set
up as Hugging Face transformers sets it up for chat templates, and writes what the C++
test (tests/test_jinja.cpp) compares against byte for byte:

  conversations.json                 the inputs: name -> the template's context
  expected/<template>.<conv>.txt     the rendering, or
  expected/<template>.<conv>.err     the template refused the input: "raise\\n<message>"
                                     for raise_exception, "other\\n<message>" otherwise

Run from anywhere with python3 and jinja2 3.1 (not needed by the build or CI):
  python3 tests/data/templates/render_expected.py
"""
import datetime
import json
import pathlib

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = pathlib.Path(__file__).resolve().parent

# strftime_now's clock, fixed for determinism; tests/test_jinja.cpp uses the same date.
FIXED_NOW = datetime.datetime(2024, 7, 26, 9, 30, 0)
# The special tokens every template gets (the test passes them as trusted strings).
BOS, EOS = "<s>", "</s>"


class RaisedError(Exception):
    pass


def raise_exception(message):
    raise RaisedError(message)


# transformers.utils.chat_template_utils._compile_jinja_template's bindings.
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city, in °C.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. \"Paris\""},
                "days": {"type": "integer", "description": "Forecast days", "default": 1},
                "units": {"type": "string", "enum": ["metric", "imperial"]},
            },
            "required": ["city"],
        },
    },
}

SYSTEM = {"role": "system", "content": "You are a terse assistant."}
HELLO = {"role": "user", "content": "Hello! Say hi back."}
HI = {"role": "assistant", "content": "Hi there."}
FOLLOW_UP = {"role": "user", "content": "What is 2+2?\nAnswer briefly."}
TOOL_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{
        "id": "call12345",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}},
    }],
}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
               "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}

CONVERSATIONS = {
    "plain": {"messages": [HELLO], "add_generation_prompt": True},
    "system": {"messages": [SYSTEM, HELLO], "add_generation_prompt": True},
    "multi_turn": {"messages": [SYSTEM, HELLO, HI, FOLLOW_UP], "add_generation_prompt": True},
    "no_generation_prompt": {"messages": [HELLO, HI], "add_generation_prompt": False},
    "reasoning": {
        "messages": [HELLO,
                     {"role": "assistant",
                      "content": "<think>\nThe user greets me.\n</think>\n\nHi there."},
                     FOLLOW_UP],
        "add_generation_prompt": True,
    },
    "reasoning_content": {
        "messages": [HELLO,
                     {"role": "assistant", "content": "Hi there.",
                      "reasoning_content": "The user greets me."},
                     FOLLOW_UP],
        "add_generation_prompt": True,
    },
    "tools": {
        "messages": [SYSTEM, {"role": "user", "content": "Weather in Paris?"}, TOOL_CALL,
                     TOOL_RESULT],
        "tools": [WEATHER_TOOL],
        "add_generation_prompt": True,
    },
    "no_thinking": {"messages": [HELLO], "add_generation_prompt": True,
                    "enable_thinking": False},
    "special_text": {
        "messages": [{"role": "user",
                      "content": "  Spell <|im_end|> and [INST] for me, café 世界 \t\"q\"\\ "}],
        "add_generation_prompt": True,
    },
}


def render(template, context):
    try:
        return "txt", template.render(**context, bos_token=BOS, eos_token=EOS)
    except RaisedError as e:
        return "err", f"raise\n{e}"
    except Exception as e:  # the C++ side must refuse too; its message may differ
        return "err", f"other\n{type(e).__name__}: {e}"


def main():
    env = environment()
    out_dir = HERE / "expected"
    out_dir.mkdir(exist_ok=True)
    for old in out_dir.iterdir():
        old.unlink()
    (HERE / "conversations.json").write_text(
        json.dumps(CONVERSATIONS, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    for path in sorted(HERE.glob("*.jinja")):
        template = env.from_string(path.read_text(encoding="utf-8"))
        for name, context in CONVERSATIONS.items():
            kind, text = render(template, context)
            (out_dir / f"{path.stem}.{name}.{kind}").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
