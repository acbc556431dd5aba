"""``python -m benchmarks.scheduler --overhead`` and ``--single`` at toy sizes: every row runs
and prints a positive per-primitive figure (the figures themselves are the benchmark's job)."""

import re

from benchmarks.scheduler import main


def test_overhead_report_prints_every_row(capsys) -> None:
    main(["--overhead", "--no-real", "--inflight", "20", "--rounds", "1", "--repeats", "1"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if re.search(r"\d+\.\d \[\s*\d+\.\d\]", line)]
    assert len(rows) == 11, out
    for line in rows:
        figures = [float(x) for x in re.findall(r"(\d+\.\d)", line.split("  ")[-1])]
        assert figures and all(f > 0 for f in figures), line
    assert "serving gc" in out and "CPU time / wall time" in out
    assert "primitives' own work" in out and "minus the primitives' own work" in out


def test_single_run_for_instruction_counts(capsys) -> None:
    main(["--single", "1", "--inflight", "20"])
    assert re.fullmatch(r"\d+\.\d us per primitive\n", capsys.readouterr().out)
