#!/usr/bin/env python3
"""The critical path of `zrtt lab browser` loads, from Chromium's network
logs (kept with `--keep`: netlog-<rtt>-<mode>-<n>.json in the working
directory the run prints).

For each log: when the HTML's last byte was read, which object's last
byte came last, when Chromium sent that object's request and how long it
took from request to last byte, all in ms from the HTML request's start.
With --all, every object: request sent, response headers read, last byte.

    python3 scripts/browser-netlog.py [--all] /tmp/zrtt-browser-*/netlog-100-*.json
"""
import json
import sys
from collections import defaultdict


def requests(path):
    """(url, sent, headers, last byte) per lab request, ms from the HTML's start."""
    with open(path) as f:
        log = json.load(f)
    names = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    sources = {v: k for k, v in log["constants"]["logSourceType"].items()}
    by_source = defaultdict(list)
    for e in log["events"]:
        by_source[e["source"]["id"]].append(e)
    rows, t0 = [], None
    for events in by_source.values():
        if sources[events[0]["source"]["type"]] != "URL_REQUEST":
            continue
        url = None
        for e in events:
            if names[e["type"]] == "URL_REQUEST_START_JOB":
                url = e.get("params", {}).get("url") or url
        if not url or ".example.com/" not in url or url.endswith("/favicon.ico"):
            continue
        marks = [(int(e["time"]), names[e["type"]], e.get("phase")) for e in events]

        def first(name, phase=None):
            return next((t for t, n, p in marks if n == name and phase in (None, p)), None)

        def last(name):
            return max((t for t, n, _ in marks if n == name), default=None)

        if url.endswith("www.example.com/"):
            t0 = marks[0][0]
        end = last("URL_REQUEST_JOB_FILTERED_BYTES_READ") or last("URL_REQUEST_JOB_BYTES_READ")
        # phase 2: the end of READ_HEADERS
        rows.append((url.split("//", 1)[1], first("HTTP_TRANSACTION_SEND_REQUEST"),
                     first("HTTP_TRANSACTION_READ_HEADERS", 2), end))
    if t0 is None:
        raise SystemExit(f"{path}: no request for http(s)://www.example.com/")
    rel = lambda t: None if t is None else t - t0
    return [(u, rel(s), rel(h), rel(b)) for u, s, h, b in rows]


def main(args):
    every = "--all" in args
    paths = [a for a in args if a != "--all"]
    if not paths:
        raise SystemExit(__doc__)
    for path in paths:
        rows = requests(path)
        html = next(r for r in rows if r[0] == "www.example.com/")
        objects = [r for r in rows if r is not html and r[3] is not None]
        crit = max(objects, key=lambda r: r[3])
        print(f"{path}: HTML last byte {html[3]} ms; last object {crit[0]}: "
              f"sent {crit[1]} ms, last byte {crit[3]} ms ({crit[3] - crit[1]} ms)")
        if every:
            for u, s, h, b in sorted(rows, key=lambda r: r[1] or 0):
                print(f"  {u:32} sent {s:>5} headers {h:>5} last byte {b:>5}")


if __name__ == "__main__":
    main(sys.argv[1:])
