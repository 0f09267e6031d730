#!/usr/bin/python3 -I
"""The smallest reviewer CLI there is: it sends its prompt to its model once and prints the reply.

Baton's ``command`` adapter runs it in the reviewer's read-only box (``review:`` in a policy), as
``review_agent.py PROMPT_FILE PROVIDER``: one OpenAI Chat Completions request to
``$BATON_MODEL_BASE_URL/PROVIDER/v1/chat/completions`` (the run's model gateway) with the run's
placeholder key in ``$BATON_MODEL_KEY``, and the model's reply, as it came, on standard output. What
that reply must be (one JSON verdict) is for Baton's prompt to ask and its parser to judge, not for
this program. A refused or failed call exits 1. Standard library only: it runs on the box's python3.
"""

import json
import os
import sys
import urllib.error
import urllib.request

#: The model asked for; the demo's stand-in answers any name.
MODEL = "mistral-large-latest"


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: review_agent.py PROMPT_FILE PROVIDER", file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as handle:
        prompt = handle.read()
    url = f"{os.environ['BATON_MODEL_BASE_URL']}/{sys.argv[2]}/v1/chat/completions"
    body = {"model": MODEL, "stream": False, "messages": [{"role": "user", "content": prompt}]}
    key = os.environ["BATON_MODEL_KEY"]
    headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:  # noqa: S310
            said = json.loads(answer.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"review_agent: the model call failed: {exc}", file=sys.stderr)
        return 1
    print(said["choices"][0]["message"]["content"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
