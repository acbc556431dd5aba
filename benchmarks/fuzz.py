"""Fuzz the server against its own OpenAPI document with Schemathesis.

    python -m benchmarks.fuzz --cases 10000 [--workers 2] [--seed 1] [--url http://...]

Without ``--url`` it starts ``python -m ayo.server`` on 127.0.0.1 (a temporary data dir, the
first 100 wiki documents, ``--max-tokens-limit 16`` so that a valid generation costs well under
a second on 2 cores). Schemathesis (``pip install -e '.[fuzz]'``) generates positive and
negative requests for every operation (``APP_CASES`` for those that run apps, the rest of
``--cases`` shared by the others) and runs all its
checks: no 5xx, status codes and content types the schema lists, responses matching their
schemas, schema-violating input rejected, schema-valid input accepted, ``Allow`` on 405, ...
(its response-time check gets 300 s: an app query makes several LLM calls on 2 cores).

Printed: cases, requests, failures by check, 5xx responses and error lines in the server's log.
Every failing case is replayable with the ``st replay`` command of the report.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import math
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from .common import machine, print_table, setup_benchmark_logging
from .server_process import ServerProcess

log = logging.getLogger("benchmarks.fuzz")

SERVER_ARGS = ["--corpus", "wiki", "--corpus-limit", "100", "--max-tokens-limit", "16"]


# Operations that run whole apps (several LLM calls, seconds each on 2 cores) get this many
# cases each; the others share the rest of --cases.
APP_CASES = 40


def budgets(doc: dict, cases: int) -> tuple[int, list[str]]:
    """Cases per cheap operation, and the config lines giving each app-running one APP_CASES."""
    ops = [f"{m.upper()} {p}" for p, items in doc["paths"].items() for m in items]
    costly = [op for op in ops if "/v1/apps/" in op and op.endswith("/query")]
    costly.append("POST /v1/chat/completions")  # app:NAME models run apps
    cheap = max(1, math.ceil((cases - APP_CASES * len(costly)) / (len(ops) - len(costly))))
    lines = [f"generation.max-examples = {cheap}\n"]
    lines += [f'[[operations]]\ninclude-name = "{op}"\ngeneration.max-examples = {APP_CASES}\n'
              for op in costly]  # fmt: skip
    return cheap, lines


def run_schemathesis(
    url: str, cases: int, workers: int, seed: int, report: Path, max_time: float | None
) -> float:
    """Run ``st`` over every operation; returns its wall time."""
    with urllib.request.urlopen(url + "/openapi.json") as r:
        doc = json.load(r)
    per_op, config = budgets(doc, cases)
    config_file = report.with_name("schemathesis.toml")
    config_file.write_text("\n".join(config))
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")
    if st is None:
        raise SystemExit("schemathesis is not installed: pip install -e '.[fuzz]'")
    log.info("%d cases per operation, %d per app-running one", per_op, APP_CASES)
    cmd = [st, "--config-file", str(config_file), "run", url + "/openapi.json", "--checks",
           "all", "--max-response-time", "300",
           "--workers", str(workers), "--seed", str(seed), "--suppress-health-check", "all",
           "--request-timeout", "300", "--no-color", "--report", "ndjson",
           "--generation-database", "none",
           "--report-ndjson-path", str(report), "--output-truncate", "true"]  # fmt: skip
    if max_time:
        cmd += ["--max-time", str(max_time)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    failures = proc.stdout.split("=== FAILURES ===")[-1] if "FAILURES" in proc.stdout else ""
    if failures:
        print(failures[:20000])
    print("\n".join(proc.stdout.splitlines()[-25:]))
    return elapsed


def summarize(report: Path) -> dict:
    """Cases, requests, statuses and failing checks (unique per case) from the ndjson report."""
    cases: set[str] = set()
    requests = 0
    statuses: collections.Counter[int] = collections.Counter()
    failed: collections.defaultdict[str, set[str]] = collections.defaultdict(set)
    errors: list[str] = []
    for line in report.read_text().splitlines():
        event = json.loads(line)
        if "NonFatalError" in event:
            value = event["NonFatalError"]["value"]
            errors.append(
                f"{event['NonFatalError'].get('label')}: {value.get('message', '')[:200]}"
            )
        if "ScenarioFinished" not in event:
            continue
        recorder = event["ScenarioFinished"]["recorder"]
        cases.update(recorder.get("cases", {}))
        status_of = {}
        for case_id, interaction in recorder.get("interactions", {}).items():
            requests += 1
            response = interaction.get("response") or {}
            if "status_code" in response:
                statuses[response["status_code"]] += 1
                status_of[case_id] = response["status_code"]
        for case_id, checks in recorder.get("checks", {}).items():
            for check in checks:
                if check["status"] == "failure":
                    name = check["name"]
                    if name == "not_a_server_error" and status_of.get(case_id) == 504:
                        name += " (504: the request's own deadline passed)"
                    failed[name].add(case_id)
    return {"cases": len(cases), "requests": requests, "statuses": statuses,
            "failed": {k: len(v) for k, v in failed.items()}, "errors": errors}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=2000, help="test cases in all (default 2000)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--url", help="fuzz a running server instead of starting one")
    ap.add_argument("--max-time", type=float, help="stop generating after this many seconds")
    args = ap.parse_args()
    setup_benchmark_logging()
    with tempfile.TemporaryDirectory(prefix="ayo-fuzz-") as tmp:
        report = Path(tmp) / "report.ndjson"
        server = None
        if args.url:
            url = args.url.rstrip("/")
            elapsed = run_schemathesis(url, args.cases, args.workers, args.seed, report,
                                       args.max_time)  # fmt: skip
        else:
            with ServerProcess(SERVER_ARGS) as server:
                elapsed = run_schemathesis(server.url, args.cases, args.workers, args.seed,
                                           report, args.max_time)  # fmt: skip
        s = summarize(report)
    print(f"\nSchemathesis against ayo.server on {machine()}: {elapsed:.0f} s")
    rows = [["cases", s["cases"]], ["requests", s["requests"]],
            ["5xx responses", sum(n for st, n in s["statuses"].items() if st >= 500)]]  # fmt: skip
    rows += [[f"failed: {name}", n] for name, n in sorted(s["failed"].items())]
    if not s["failed"]:
        rows.append(["failed checks", 0])
    rows.append(["schemathesis errors", len(s["errors"])])
    if server is not None:
        rows.append(["server log errors", len(server.errors())])
        rows.append(["malformed HTTP answered 400 by aiohttp", len(server.http_rejections())])
        rows.append([f"SIGTERM: exit {server.exit_code}", f"{server.exit_s:.1f} s"])
    print_table(["", "count"], rows)
    print("statuses:", dict(sorted(s["statuses"].items())))
    for line in s["errors"][:10]:
        print("schemathesis error:", line)
    if server is not None:
        for line in server.errors()[:20]:
            print("server:", line[:300])


if __name__ == "__main__":
    main()
