#!/usr/bin/python3
"""Renders the chat templates in tests/data/chat_template/ with Python jinja2 the way
transformers' apply_chat_template does, and writes the expected strings the C++ interpreter is
checked against (tests/data/chat_template/expected.json).

  /usr/bin/python3 tools/chat_template/make_expected.py   # Debian python3-jinja2 (3.1.2)

Environment as in transformers (utils/chat_template_utils.py): ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and loopcontrols; tojson = json.dumps(ensure_ascii=False, indent=...);
raise_exception raises; strftime_now is not exercised (it depends on the clock).
"""
import json
import os
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "tests", "data", "chat_template")


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_user": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello. How can I help?"},
        {"role": "user", "content": "Name a prime.\nJust one."},
    ],
    "assistant_last": [
        {"role": "user", "content": "Say yes."},
        {"role": "assistant", "content": "yes"},
    ],
    "thinking_history": [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nreasoning here\n</think>\n\nA1"},
        {"role": "user", "content": "  Q2 with spaces  "},
    ],
    "unicode": [
        {"role": "system", "content": "Réponds en français — s'il te plaît."},
        {"role": "user", "content": "日本語のテキスト 🙂 and \"quotes\" \\ backslash"},
    ],
    "tool_round": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"type": "function", "function": {"name": "get_weather",
                                               "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "tool", "content": "{\"sky\": \"clear\"}"},
    ],
}

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather <b>now</b> & here",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]

# (template file, conversations it supports). Tool-call conversations only for templates that
# render tool calls.
FAMILY = {
    "olmoe_instruct.jinja": ["single_user", "system_user", "multi_turn", "assistant_last", "unicode"],
    "qwen3_moe.jinja": list(CONVERSATIONS),
    "deepseek_v3.jinja": list(CONVERSATIONS),
    "moonlight.jinja": ["single_user", "system_user", "multi_turn", "assistant_last", "unicode"],
    "chatml.jinja": ["single_user", "system_user", "multi_turn", "assistant_last", "unicode"],
}

# Small templates exercising each feature of the subset on its own.
SNIPPETS = [
    ("filters", "{{ '  a b  ' | trim }}|{{ [1,2,3] | length }}|{{ 'abc' | upper }}|{{ 'ABC' | lower }}|"
                "{{ ['x','y'] | join('-') }}|{{ undefined_var | default('dflt') }}|{{ [3,1,2] | sort | list }}|"
                "{{ [1,2,3] | first }}{{ [1,2,3] | last }}|{{ [1,2,3] | reverse | list }}|{{ 'hello world' | title }}|"
                "{{ 'aXbX' | replace('X', '-') }}|{{ -3 | abs }}|{{ [1,1,2] | unique | list }}|{{ 'a' ~ 1 ~ none }}"),
    ("tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ [1, 2.5, true, none, 'é\"\\n'] | tojson }}"),
    ("items", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d | items %}{{ k }},{% endfor %}"),
    ("loop", "{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.length }}"
             "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %} {% endfor %}"),
    ("loop_else_filter", "{% for x in xs if x > 1 %}{{ x }}{% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}"),
    ("break_continue", "{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("strings", "{{ s.startswith('He') }}{{ s.endswith('!') }}|{{ s.split(' ') }}|{{ s.split() | length }}|"
                "{{ '  x  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n\\nq'.lstrip('\\n') }}|{{ 'q\\n\\n'.rstrip() }}|"
                "{{ s[1:4] }}|{{ s[::-1] }}|{{ s[-1] }}|{{ s.upper() }}|{{ s.replace('l', 'L') }}|{{ s.find('o') }}"),
    ("slices", "{{ xs[1:] }}{{ xs[:2] }}{{ xs[::-1] }}{{ xs[-2:] }}{{ xs[::2] }}{{ xs[5:9] }}"),
    ("namespace_set", "{% set ns = namespace(n=0, found=false) %}{% for x in xs %}{% set ns.n = ns.n + x %}"
                      "{% if x == 3 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.n }} {{ ns.found }}"
                      "{% set y = 5 %}{% for x in xs %}{% set y = x %}{% endfor %} {{ y }}"),
    ("arith", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} "
              "{{ (1 + 2) * 3 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 3.0 }} {{ 10 / 4 }} {{ xs | length - 1 }}"),
    ("tests", "{{ x is defined }}{{ nope is defined }}{{ none is none }}{{ 's' is string }}{{ 1 is number }}"
              "{{ d is mapping }}{{ xs is iterable }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}"
              "{{ x is not none }}{{ true is true }}{{ 1 is integer }}{{ 1.5 is float }}"),
    ("compare_logic", "{{ 1 < 2 and 2 <= 2 }}{{ 'a' in 'cat' }}{{ 3 not in xs }}{{ not false }}{{ 1 == 1.0 }}"
                      "{{ [1,2] == [1,2] }}{{ 'b' if false else 'c' }}{{ 'y' if true }}{{ none or 'z' }}{{ 0 and 1 }}"),
    ("whitespace", "a\n  {% if true %}\n    b\n  {% endif %}\nc\n{%- if true -%}  d  {%- endif -%}\n e {{- ' f ' -}} g\n"
                   "  {# comment #}\nh {{ 'i' }}\n  {%+ if true %}j{% endif %}"),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C') }}"),
    ("set_block", "{% set block %}x{{ 1 + 1 }}y{% endset %}[{{ block }}]"),
    ("selectattr", "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}|"
                   "{{ msgs | rejectattr('role', 'equalto', 'user') | list | length }}|{{ xs | select('odd') | list }}"),
    ("dict_literal", "{% set m = {'a': 1, 'b': [1, 2]} %}{{ m['a'] }}{{ m.b[1] }}{{ m.get('c', 'no') }}{{ m | length }}{{ m.keys() | list }}"),
    ("repr", "{{ [1, 'a', none, true, 1.5, {'k': 'v'}] }}|{{ d }}|{{ \"it's\" }}|{{ [\"it's\"] }}"),
    ("raise", "{% if xs | length > 2 %}{{ raise_exception('too many: ' ~ xs | length) }}{% endif %}ok"),
]

SNIPPET_CONTEXT = {
    "xs": [1, 2, 3, 4],
    "x": 1,
    "s": "Hello world!",
    "d": {"b": 1, "a": [1, 2], "c": {"n": None, "t": True}},
    "msgs": [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
             {"role": "assistant", "content": "A"}, {"role": "user", "content": "U2"}],
}


def render(env, source, ctx):
    try:
        return {"output": env.from_string(source).render(**ctx)}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


def main():
    env = environment()
    cases = []
    for name, convs in FAMILY.items():
        source = open(os.path.join(DATA, name), encoding="utf-8").read()
        for conv in convs:
            for agp in (True, False):
                for with_tools in ((False, True) if name == "qwen3_moe.jinja" else (False,)):
                    ctx = {"messages": CONVERSATIONS[conv], "add_generation_prompt": agp,
                           "bos_token": "<BOS>", "eos_token": "<EOS>"}
                    if with_tools:
                        ctx["tools"] = TOOLS
                    if name == "qwen3_moe.jinja" and conv == "single_user" and not agp:
                        ctx["enable_thinking"] = False
                    case = {"template": name, "conversation": conv, "context": ctx}
                    case.update(render(env, source, ctx))
                    cases.append(case)
    for name, source in SNIPPETS:
        case = {"snippet": name, "source": source, "context": SNIPPET_CONTEXT}
        case.update(render(env, source, SNIPPET_CONTEXT))
        cases.append(case)
    out = os.path.join(DATA, "expected.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "cases": cases}, f, ensure_ascii=False,
                  indent=1)
        f.write("\n")
    print(f"wrote {len(cases)} cases to {out} (jinja2 {jinja2.__version__})", file=sys.stderr)


if __name__ == "__main__":
    main()
