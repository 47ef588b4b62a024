"""A hook payload over the 64 MiB limit: the hook's reader (msgspec) against the alternatives.

    PYTHONPATH=src .venv/bin/python bench/json_skim.py [--rounds 3] [--sizes 70,300]
        [--other-python /tmp/libvenv/bin/python]   # an interpreter with ijson
        [--readers hook,jsonio,orjson,ijson]

Each reader runs in a fresh process that gets the payload on a pipe (``cat FILE | python ...``),
as the hook gets it from Claude Code, and ends with what the hook needs from it: the payload's
members, every value over 1 MiB replaced by ``"<N characters left out>"``. Reported: the time
from the first read to the decoded payload (stdin to its end included), the process's peak RSS
(``ru_maxrss``) and the time to import the reader's modules (in-process, after the interpreter's
start; ``-X importtime`` gives the same order). Readers:

- ``hook``: the hook as it is: stdin read whole, ``_hooks._loads_oversized`` (msgspec: the
  members checked and handed over as ``msgspec.Raw`` slices of the input, only the small ones
  decoded);
- ``jsonio``: stdin read whole, ``_jsonio.loads`` (the standard library's C scanner), then the
  large values replaced;
- ``orjson``: stdin read whole, ``orjson.loads`` (already a dependency), then the same;
- ``ijson``: ``ijson.parse`` (yajl2_c backend) over stdin in 1 MiB reads; large strings replaced
  as their events come (``--other-python``; containers are built whole).

Until bbfa878 the hook read such a payload with ``_jsonskim.loads_skimmed`` (a streaming skimmer
of Phoenix's own, 366 lines: the first 64 MiB held, the rest read in 1 MiB pieces, large values
passed over undecoded, a 2 s budget); this script there has it as the reader ``skim`` (and the
hook's reader as ``msgspec``).

Payloads (``--sizes`` in MB of tool output): ``bash``, a Bash tool response whose ``stdout`` is
the output (ASCII with quotes and backslashes, as in tests/integrations/test_hooks_oversized.py);
``write``, a Write of ``é`` * N/2 (UTF-8, as Claude Code writes it); ``tiny``, a tool response
holding N/7 one-digit numbers in lists of ten (millions of values to check).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

READER = r"""
import os, resource, sys, time
t0 = time.perf_counter()
mode, max_value = sys.argv[1], 1 << 20
if mode == "hook":
    from phoenix_protocol.integrations import _hooks
    import msgspec  # imported by _loads_oversized: counted with the imports
elif mode == "jsonio":
    from phoenix_protocol.core._jsonio import loads, dumps_line
elif mode == "orjson":
    import orjson
elif mode == "ijson":
    import ijson
elif mode == "none":  # the interpreter alone
    print(0, 0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    sys.exit()
t1 = time.perf_counter()
stream = sys.stdin.buffer


def left_out(value, size_of):
    # The hook's rule: an object keeps its members (three keys deep), a larger value is left out.
    # (An object within three keys keeps its members: when it is small they are small too.)
    def visit(v, depth):
        if isinstance(v, dict) and depth < 3:
            return {k: visit(x, depth + 1) for k, x in v.items()}
        size = size_of(v)  # each value encoded once
        return v if size <= max_value else f"<{size} characters left out>"
    return visit(value, 0)


if mode == "hook":
    value = _hooks._loads_oversized(stream.read())[0]
elif mode == "jsonio":
    value = left_out(loads(stream.read()), lambda v: len(dumps_line(v)))
elif mode == "orjson":
    value = left_out(orjson.loads(stream.read()), lambda v: len(orjson.dumps(v)))
elif mode == "ijson":
    stack, key, value = [], None, None
    for prefix, event, v in ijson.parse(stream, buf_size=1 << 20):
        if event == "map_key":
            key = v
            continue
        if event in ("start_map", "start_array"):
            new = {} if event == "start_map" else []
            if stack:
                stack[-1].append(new) if isinstance(stack[-1], list) else stack[-1].__setitem__(key, new)
            stack.append(new)
            continue
        if event in ("end_map", "end_array"):
            value = stack.pop()
            continue
        if isinstance(v, str) and len(v) > max_value:
            v = f"<{len(v)} characters left out>"
        if stack:
            stack[-1].append(v) if isinstance(stack[-1], list) else stack[-1].__setitem__(key, v)
        else:
            value = v
t2 = time.perf_counter()
assert value["session_id"] == "sess-big", value.keys()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{(t1 - t0) * 1000:.2f} {(t2 - t1) * 1000:.1f} {rss:.0f}")
"""


def payloads(directory: str, sizes: list[int]) -> list[tuple[str, str]]:
    made = []
    for mb in sizes:
        n = mb * 1_000_000
        body = {"session_id": "sess-big", "transcript_path": "/tmp/t.jsonl", "cwd": "/repo"}
        line = 'line of build output \\ with "quotes"\n'
        bash = {
            **body,
            "hook_event_name": "PostToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": "make"},
            "tool_response": {"stdout": line * (n // len(line)), "stderr": "", "interrupted": True},
            "tool_use_id": "toolu_1",
        }
        write = {
            **body,
            "hook_event_name": "PostToolUseFailure",
            "tool_name": "Write",
            "tool_input": {"file_path": "/repo/big.txt", "content": "é" * (n // 2)},
            "tool_use_id": "t",
            "error": "ENOSPC",
        }
        tiny = {**bash, "tool_response": {"content": [[1] * 10] * (n // 31), "interrupted": False}}
        for name, doc in (("bash", bash), ("write", write), ("tiny", tiny)):
            path = os.path.join(directory, f"{name}{mb}.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump(doc, f, ensure_ascii=False)
            made.append((f"{name} {os.path.getsize(path) / 1e6:.0f} MB", path))
    return made


def run(python: str, mode: str, path: str) -> tuple[float, float, float] | None:
    proc = subprocess.run(
        ["sh", "-c", 'cat "$1" | "$2" -c "$3" "$4"', "sh", path, python, READER, mode],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        if "ModuleNotFoundError" in proc.stderr:
            return None
        raise RuntimeError(f"{mode} {path}: {proc.stderr[-1500:]}")
    imp, seconds, rss = (float(x) for x in proc.stdout.split())
    return imp, seconds, rss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="70,300")
    parser.add_argument("--other-python", default=None, help="an interpreter with ijson installed")
    parser.add_argument("--readers", default="hook,jsonio,orjson,ijson")
    args = parser.parse_args()
    wanted = args.readers.split(",")
    readers = [(m, sys.executable) for m in ("hook", "jsonio", "orjson")]
    if args.other_python:
        readers.append(("ijson", args.other_python))
    readers = [(m, python) for m, python in readers if m in wanted]
    with tempfile.TemporaryDirectory() as tmp:
        docs = payloads(tmp, [int(s) for s in args.sizes.split(",")])
        base = [run(sys.executable, "none", docs[0][1]) for _ in range(3)]
        bare_rss = statistics.median(b[2] for b in base if b)
        print(f"rounds {args.rounds}; a process that reads nothing: peak RSS {bare_rss:.0f} MB\n")
        print("| payload | reader | import (ms) | read + decode (ms) | peak RSS (MB) |")
        print("|---|---|---:|---:|---:|")
        for label, path in docs:
            results: dict[str, list[tuple[float, float, float]]] = {m: [] for m, _ in readers}
            for _ in range(args.rounds):  # interleaved: noise hits every reader alike
                for mode, python in readers:
                    got = run(python, mode, path)
                    if got is not None:
                        results[mode].append(got)
            for mode, _ in readers:
                rows = results[mode]
                if not rows:
                    print(f"| {label} | {mode} | not installed | | |")
                    continue
                imp = statistics.median(r[0] for r in rows)
                secs = statistics.median(r[1] for r in rows)
                rss = max(r[2] for r in rows)
                print(f"| {label} | {mode} | {imp:.1f} | {secs:.0f} | {rss:.0f} |")


if __name__ == "__main__":
    main()
