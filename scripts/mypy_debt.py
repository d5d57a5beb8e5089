"""Rewrite the "type debt" block of pyproject.toml: per module, the mypy error codes it still fails.

    .venv/bin/python scripts/mypy_debt.py

Runs mypy without the block and writes one [[tool.mypy.overrides]] entry per module that has errors, with
`disable_error_code` set to exactly the codes it fails (counted in a comment). Run it after fixing errors (the
entry shrinks or goes) or after moving modules (entries follow the new names); review the diff: the block
should only ever shrink.
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
BEGIN, END = "# >>> type debt", "# <<< type debt"
ERROR = re.compile(r"(autopar/\S+?)\.py:\d+: error: .*\[([a-z-]+)\]$")
# Why a module's debt is left for later, where the reason is not "not fixed yet" (none at present).
WHY: dict[str, str] = {}


def without_block(text: str) -> str:
    if BEGIN not in text:
        return text
    return text[: text.index(BEGIN)].rstrip("\n") + "\n" + text[text.index(END) + len(END) :].lstrip("\n")


def debt(mypy_output: str) -> dict[str, collections.Counter[str]]:
    codes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in mypy_output.splitlines():
        m = ERROR.match(line)
        if m:
            codes[m.group(1).replace("/", ".").removesuffix(".__init__")][m.group(2)] += 1
    return codes


def block(codes: dict[str, collections.Counter[str]]) -> list[str]:
    total = sum(sum(c.values()) for c in codes.values())
    out = [
        BEGIN,
        "# Type debt (scripts/mypy_debt.py writes this block): the error codes each module still fails, switched",
        "# off for that module only (no blanket ignore_errors). Fix a module's errors and rerun the script.",
        f"# {total} errors when written.",
    ]
    for mod in sorted(codes):
        c = codes[mod]
        why = WHY.get(mod)
        out += ["", "[[tool.mypy.overrides]]", *([f"# {why}"] if why else [])]
        out.append(f'module = "{mod}"  # ' + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
        out.append("disable_error_code = [" + ", ".join(f'"{k}"' for k in sorted(c)) + "]")
    return [*out, END]


def main() -> int:
    text = without_block(PYPROJECT.read_text())
    PYPROJECT.write_text(text)
    mypy = Path(sys.executable).parent / "mypy"
    run = subprocess.run([str(mypy)], capture_output=True, text=True, cwd=PYPROJECT.parent)
    codes = debt(run.stdout)
    if codes:
        PYPROJECT.write_text(text.rstrip("\n") + "\n\n" + "\n".join(block(codes)) + "\n")
    print(run.stdout.splitlines()[-1] if run.stdout else run.stderr, "(without the debt block)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
