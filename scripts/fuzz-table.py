#!/usr/bin/env python3
"""Markdown table of the last fuzz run of each target, from fuzz/logs/<target>.log
(libFuzzer's final line and -print_final_stats) and fuzz/corpus/<target>.
    python3 scripts/fuzz-table.py [TARGET...]"""
import pathlib, re, sys

root = pathlib.Path(__file__).resolve().parent.parent / "fuzz"
names = sys.argv[1:] or sorted(p.stem for p in (root / "logs").glob("*.log"))
print("| Target | Executions | Exec/s (avg) | cov | ft | Corpus (units/bytes in memory) | Corpus files on disk | Crashes |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for t in names:
    log = (root / "logs" / f"{t}.log").read_text(errors="replace")
    done = [l for l in log.splitlines() if re.match(r"#\d+\s+DONE", l)]
    last = done[-1] if done else ""
    m = lambda pat, s=log: (re.search(pat, s) or [None, "?"])[1]
    execs = m(r"stat::number_of_executed_units:\s+(\d+)")
    rate = m(r"stat::average_exec_per_sec:\s+(\d+)")
    cov, ft = m(r"cov: (\d+)", last), m(r"ft: (\d+)", last)
    corp = m(r"corp: (\S+)", last)
    files = len(list((root / "corpus" / t).iterdir())) if (root / "corpus" / t).exists() else 0
    crash = "yes: " + m(r"Test unit written to (\S+)") if "Test unit written" in log else "none"
    print(f"| `{t}` | {int(execs):,} | {int(rate):,} | {cov} | {ft} | {corp} | {files} | {crash} |"
          if execs != "?" else f"| `{t}` | ? | ? | {cov} | {ft} | {corp} | {files} | {crash} |")
