#!/usr/bin/env python3
"""The official `openai` Python client against `steermoe serve`: a chat, non-streaming and
streaming, must give the same text; the completions endpoint through the client too.

  python3 openai_chat.py http://127.0.0.1:PORT/v1
"""
import sys

from openai import OpenAI


def main():
    client = OpenAI(base_url=sys.argv[1], api_key=sys.argv[2] if len(sys.argv) > 2 else "none")
    model = client.models.list().data[0].id
    messages = [{"role": "system", "content": "You write Python."},
                {"role": "user", "content": "def fibonacci(n):"}]
    once = client.chat.completions.create(model=model, messages=messages, max_tokens=32,
                                          temperature=0)
    text = once.choices[0].message.content
    streamed = ""
    chunks = 0
    for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=32,
                                                temperature=0, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            streamed += chunk.choices[0].delta.content
        chunks += 1
    print(f"chat: {once.usage.prompt_tokens} prompt tokens, {once.usage.completion_tokens} generated, "
          f"finish {once.choices[0].finish_reason}; streamed in {chunks} chunks")
    print("chat text:", repr(text))
    assert streamed == text, (streamed, text)
    comp = client.completions.create(model=model, prompt="import os\nimport", max_tokens=8,
                                     temperature=0, logprobs=2, echo=True)
    print("completion:", repr(comp.choices[0].text), comp.choices[0].logprobs.token_logprobs[:4])
    print("openai client: streaming == non-streaming, OK")


if __name__ == "__main__":
    main()
