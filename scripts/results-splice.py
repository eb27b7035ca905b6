#!/usr/bin/env python3
"""Copies each scenario's markdown (docs/results/<name>.md, written by
`zrtt lab <name> --out docs/results`) into docs/RESULTS.md between the
markers `<!-- BEGIN <name> -->` and `<!-- END <name> -->`, and the hub
check (check.txt) between `<!-- BEGIN check -->` / `<!-- END check -->`.
Relative links in the markdown (the SVG beside it, docs/LAB.md) are made
relative to RESULTS.md. Text outside the markers (the reading of the
results) is left alone."""
import os
import re
import sys

doc, results = sys.argv[1], sys.argv[2]
text = open(doc).read()
rel = os.path.relpath(results, os.path.dirname(doc))
for m in re.finditer(r"<!-- BEGIN (\w+) -->", text):
    name = m.group(1)
    md = os.path.join(results, f"{name}.md")
    txt = os.path.join(results, f"{name}.txt")
    if os.path.exists(md):
        body = open(md).read().strip()
        # Links are relative to the results directory (images beside the
        # markdown, docs/LAB.md one level up); make them relative to DOC.
        body = re.sub(
            r"\]\(([^):#]+)(#[^)]*)?\)",
            lambda l: "]("
            + os.path.normpath(os.path.join(rel, l.group(1))).replace(os.sep, "/")
            + (l.group(2) or "")
            + ")",
            body,
        )
        # Scenario titles become subsections.
        body = re.sub(r"^## ", "### ", body, flags=re.M)
    elif os.path.exists(txt):
        body = "```text\n" + open(txt).read().strip() + "\n```"
    else:
        continue
    text = re.sub(
        rf"(<!-- BEGIN {name} -->\n)(?:.*?\n)?(<!-- END {name} -->)",
        lambda mm: mm.group(1) + body + "\n" + mm.group(2),
        text,
        flags=re.S,
    )
open(doc, "w").write(text)
