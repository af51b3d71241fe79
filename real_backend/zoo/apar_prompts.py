"""Write the APAR evaluation prompts (`data/prompts/apar_stdlib.jsonl`) from this machine's
stdlib: the held-out structured lists' requests and as many held-out code openings.

    python -m real_backend.zoo.apar_prompts data/prompts/apar_stdlib.jsonl
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

from real_backend.zoo.apar_data import doc_lists, eval_prompts
from real_backend.zoo.specs import APAR_SMALL


def prompt_lines() -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    prompts = eval_prompts(doc_lists(stdlib, APAR_SMALL.max_items), stdlib)
    count = len(prompts["structured"])
    rows = [
        (kind, text) for kind in ("structured", "unstructured") for text in prompts[kind][:count]
    ]
    return [
        json.dumps({"question_id": i + 1, "category": kind, "turns": [text]})
        for i, (kind, text) in enumerate(rows)
    ]


def main(argv: list[str]) -> int:
    Path(argv[0]).write_text("\n".join(prompt_lines()) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
