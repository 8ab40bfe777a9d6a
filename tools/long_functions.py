#!/usr/bin/env python3
"""List functions longer than a limit (default 80 lines) in C++ files: a brace-matching
heuristic (namespace, class and struct bodies are not functions; a function is a brace block
opened after a line with a parameter list). Usage: tools/long_functions.py [--limit N] PATH..."""
import re
import sys
from pathlib import Path

KEYWORDS = ("if", "for", "while", "switch", "else", "do", "namespace", "struct", "class", "enum", "union", "try", "catch")


def functions(text):
    lines = text.split("\n")
    out, stack, header = [], [], ""
    for i, line in enumerate(lines):
        code = re.sub(r'"(\\.|[^"\\])*"', '""', line.split("//")[0])
        header = (header + " " + code.strip())[-400:] if "{" not in code else header + " " + code.strip()
        for ch in code:
            if ch == "{":
                h = header.strip()
                first = re.match(r"[A-Za-z_]+", h.split("(")[0].split()[-1] if h.split("(")[0].split() else "")
                is_fn = ("(" in h and ")" in h and not any(re.search(r"\b%s\b" % k, h.split("(")[0]) for k in KEYWORDS)
                         and not h.rstrip("{ ").endswith(("=", ",", "return")) and all(not f for _, f, _ in stack))
                stack.append((i, is_fn, h[-120:]))
                header = ""
            elif ch == "}":
                if stack:
                    start, is_fn, h = stack.pop()
                    if is_fn:
                        out.append((start + 1, i - start + 1, h))
        if code.strip().endswith((";", "}")):
            header = ""
    return out


def main(argv):
    limit = 80
    if argv[:1] == ["--limit"]:
        limit, argv = int(argv[1]), argv[2:]
    bad = 0
    for root in argv:
        paths = [Path(root)] if Path(root).is_file() else sorted(Path(root).rglob("*.cpp")) + sorted(Path(root).rglob("*.hpp"))
        for p in paths:
            for line, n, h in functions(p.read_text()):
                if n > limit:
                    bad += 1
                    print(f"{p}:{line}: {n} lines: {h.strip()[:100]}")
    print(f"{bad} function(s) over {limit} lines")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
