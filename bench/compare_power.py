"""False alarms and power of ``task=compare`` (issue 49's targets), at threads=1, printed with the CPU model and
the load average. Each scenario is a command of its own (``--scenario``); ``--comparisons`` sets how many
comparisons it runs (small to try it, the targets' counts on a quiet machine):

1. ``aa`` (A/A, interleaved, the fake samples executable): ``--comparisons`` (target: 100) runs of
   ``task=compare compare.a... compare.b...`` with the same executable on both sides
   (``tests/data/compare/scaled_relu.py``, ReLU on ``relu_small``'s problems); the false-alarm rate is the share
   of comparisons whose gate (``compare.fail_on=slower``) failed, and the share of operations called changed.
2. ``neighbour`` (A/A, interleaved, beside a neighbour): the ResNet-50 conv sweep (23 operations) as A and B,
   ``--comparisons`` (target: 10) times, while a memory-bound process (a STREAM triad loop) runs on the other
   core and dlbench is pinned to the rest. Targets: the gate fails 0 times; at most 1 operation in 230 is called
   changed; at least 80% are called ``same``.
3. ``slowdown`` (a real 10% slowdown, interleaved): B is the same executable (``bench/compare_conf/scaled.py``)
   with the even ids' calls reported 10% slower on the same work, through the side's environment
   (``compare.b.env.SCALED_TIME=1.1``; ``--slowdown size``: their problems 10% larger instead,
   ``SCALED_FACTOR``, which is not 10% slower: a larger H changes kernels and moves the odd ids too).
   Targets: the gate fails in every comparison (10 of 10), and >= 90% of the slowed operations are ``slower``.
4. ``stored`` (stored runs, quiet machine): two identical conv sweeps compared (A/A: at most 1 of 23 called
   changed), and a sweep against one with the 10% slowdown (>= 90% of the slowed found), ``--comparisons``
   pairs of each; the reference probes' movement between the sides (memory and compute) is printed beside, and
   a pair whose machine moved more than the threshold gets ``moved``, not ``slower``.

Try it quickly (minutes, any machine):

    python bench/compare_power.py --scenario aa --comparisons 2 --rounds 4

The targets' runs (a quiet machine, about an hour for ``aa``; ``neighbour`` needs two cores or more):

    python bench/compare_power.py --scenario aa --comparisons 100
    python bench/compare_power.py --scenario neighbour --comparisons 10
    python bench/compare_power.py --scenario slowdown --comparisons 10
    python bench/compare_power.py --scenario stored --comparisons 3
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from io import StringIO
from pathlib import Path

import pandas as pd
from _common import ROOT, STORE_HELP, load_average, store_uri

from dlbench.analysis.comparison.change import ChangeSettings, is_total, verdict_counts
from dlbench.analysis.comparison.machine import machine_moved, probe_ratios, with_moves
from dlbench.analysis.comparison.sides import Pair, changes_of_pairs, protocol_reader
from dlbench.tracking.store import download_artifact, resolve_tracking, search_runs

EXPERIMENT = "compare-power"
CONF = ROOT / "bench" / "compare_conf"
FAKE_CONF = ROOT / "tests" / "data" / "compare"
CHANGED = ("slower", "faster")
#: a memory-bound neighbour: STREAM's triad over arrays larger than the caches, forever, on the CPU it is given
NEIGHBOUR = (
    "import os, sys\nfrom dlbench.operators.reference import machine_triad_elements, triad\nimport numpy as np\n"
    "os.sched_setaffinity(0, {int(sys.argv[1])})\nn = machine_triad_elements()\n"
    "a, b, c = np.zeros(n), np.ones(n), np.ones(n)\nwhile True:\n    triad(a, b, c, 3.0)\n"
)


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def dlbench(args: argparse.Namespace, uri: str, name: str, *overrides: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dlbench", *overrides, f"threads={args.threads}", f"mlflow.tracking_uri={uri}",
               f"mlflow.experiment={EXPERIMENT}", f"mlflow.run_name={name}", "quiet=true"]  # fmt: skip
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)  # noqa: S603


def run_id(uri: str, name: str) -> str:
    runs = search_runs(resolve_tracking(uri, EXPERIMENT), f"tags.`mlflow.runName` = '{name}'", [EXPERIMENT])
    return str(runs["run_id"].iloc[0])


def changes_of(uri: str, name: str) -> pd.DataFrame:
    with tempfile.TemporaryDirectory() as tmp:
        path = download_artifact(resolve_tracking(uri, EXPERIMENT), run_id(uri, name), "changes.csv", Path(tmp))
        return pd.read_csv(StringIO(path.read_text()))


def interleaved(args: argparse.Namespace, uri: str, label: str, sides: tuple[str, ...]) -> tuple[int, pd.DataFrame]:
    """One ``task=compare`` of A and B in one run; its exit status and ``changes.csv``."""
    name = f"power-{label}-{time.time_ns()}"
    before = load_average()
    result = dlbench(args, uri, name, "task=compare", *sides, f"compare.rounds={args.rounds}",
                     f"batch_size={args.batch}", "compare.fail_on=slower")  # fmt: skip
    if result.returncode not in (0, 1):
        raise SystemExit(f"{label} failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    changes = changes_of(uri, name)
    total = changes[is_total(changes["operation"])].iloc[0]
    interval = f"{total.ratio:.3f} ({total.low:.3f}-{total.high:.3f}) {total.verdict}"
    print(f"{label}: exit {result.returncode}, {verdict_counts(changes)}, total {interval}; load {before} -> "
          f"{load_average()}", flush=True)  # fmt: skip
    return result.returncode, changes


def operations(changes: pd.DataFrame) -> pd.DataFrame:
    return changes[~is_total(changes["operation"])]


def false_alarms(args: argparse.Namespace, uri: str, label: str, sides: tuple[str, ...]) -> None:
    """A/A comparisons: how often the gate failed, operations called changed, and called ``same``."""
    gates, ops = 0, []
    for index in range(args.comparisons):
        status, changes = interleaved(args, uri, f"{label}{index + 1}", sides)
        gates += status == 1
        ops.append(operations(changes))
    every = pd.concat(ops, ignore_index=True)
    changed, same = int(every["verdict"].isin(CHANGED).sum()), int((every["verdict"] == "same").sum())
    print(f"\n{label}: the gate failed in {gates} of {args.comparisons} A/A comparisons ({gates / args.comparisons:.1%}"
          f" false alarms); {changed} of {len(every)} operations called changed; {same} ({same / len(every):.0%}) "
          "called same")  # fmt: skip


def neighbour(args: argparse.Namespace, uri: str) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("the neighbour scenario needs two CPUs or more: one for the neighbour, one for dlbench")
    process = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(cpus[-1])], cwd=ROOT)  # noqa: S603
    os.sched_setaffinity(0, set(cpus[:-1]))  # dlbench and its executables on the other CPUs (inherited)
    try:
        print(f"neighbour: a STREAM triad loop on CPU {cpus[-1]} (pid {process.pid}); dlbench on {cpus[:-1]}")
        sides = ("+benchmark=conv", "compare.a.backend=torch", "compare.b.backend=torch")
        false_alarms(args, uri, "neighbour-aa-", sides)
    finally:
        process.terminate()
        process.wait(timeout=30)
        os.sched_setaffinity(0, set(cpus))


def slowdown(args: argparse.Namespace, uri: str) -> None:
    variable = "SCALED_FACTOR" if args.slowdown == "size" else "SCALED_TIME"
    sides = ("+benchmark=conv", f"--config-dir={CONF}", "compare.a.implementation=conv_as_is",
             "compare.b.implementation=conv_as_is", f"+compare.b.env.{variable}=1.1")  # fmt: skip
    gates, caught, slowed = 0, 0, 0
    for index in range(args.comparisons):
        status, changes = interleaved(args, uri, f"slowdown{index + 1}", sides)
        gates += status == 1
        ops = operations(changes)
        even = ops[ops["op_id"] % 2 == 0]
        caught, slowed = caught + int((even["verdict"] == "slower").sum()), slowed + len(even)
        odd = ops[ops["op_id"] % 2 == 1]
        print(f"  slowed operations' ratios: {', '.join(f'{r:.3f}' for r in even['ratio'])}; unchanged called "
              f"changed: {int(odd['verdict'].isin(CHANGED).sum())} of {len(odd)}")  # fmt: skip
    print(f"\nslowdown: the gate failed in {gates} of {args.comparisons} (target: all); {caught} of {slowed} slowed "
          f"operations called slower ({caught / max(slowed, 1):.0%}, target >= 90%)")  # fmt: skip


def sweep(args: argparse.Namespace, uri: str, label: str, backend: str) -> str:
    name = f"power-{label}-{time.time_ns()}"
    overrides = ("+benchmark=conv", f"backend={backend}", f"--config-dir={CONF}", f"batch_size={args.batch}")
    result = dlbench(args, uri, name, *overrides)
    if result.returncode != 0:
        raise SystemExit(f"{label} failed:\n{result.stderr[-2000:]}")
    return run_id(uri, name)


def stored(args: argparse.Namespace, uri: str) -> None:
    from dlbench.analysis.comparison.runs import run_table

    target = resolve_tracking(uri, EXPERIMENT)
    settings = ChangeSettings()
    for index in range(args.comparisons):
        for kind, backends in (("aa", ("conv_as_is", "conv_as_is")), ("slowdown", ("conv_as_is", "conv_slowed"))):
            a, b = (
                sweep(args, uri, f"stored-{kind}{index + 1}-{side}", x) for side, x in zip("AB", backends, strict=True)
            )
            pair = Pair(f"{kind} {index + 1}", (a,), (b,))
            changes = changes_of_pairs([pair], protocol_reader(target, lambda _: False), settings)
            runs = run_table(search_runs(target, "", [EXPERIMENT]))
            ratios = probe_ratios(runs, [a], [b])
            changes = with_moves(changes, [pair], [machine_moved(ratios, settings.threshold)])
            ops = operations(changes)
            even = ops[ops["op_id"] % 2 == 0]
            found = f"; slowed found {int((even['verdict'] == 'slower').sum())} of {len(even)}" if kind != "aa" else ""
            probes = ", ".join(f"{n} {r:.3f}" for n, r in ratios.items()) or "none"
            print(f"stored {kind} {index + 1}: {verdict_counts(changes)}; called changed "
                  f"{int(ops['verdict'].isin(CHANGED).sum())} of {len(ops)}{found}; probes B / A {probes}; load "
                  f"{load_average()}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("aa", "neighbour", "slowdown", "stored"), default="aa")
    parser.add_argument("--comparisons", type=int, default=None, help="default: the scenario's target count")
    parser.add_argument("--rounds", type=int, default=20, help="compare.rounds of the interleaved scenarios")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument(
        "--slowdown", choices=("time", "size"), default="time",
        help="slowdown scenario: B's even ids reported 10%% slower (time) or their problems 10%% larger (size)",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--store", default=str(ROOT / ".dlbench" / "bench" / "compare_power" / "mlflow.db"), help=STORE_HELP
    )
    args = parser.parse_args()
    if args.comparisons is None:
        args.comparisons = {"aa": 100, "neighbour": 10, "slowdown": 10, "stored": 3}[args.scenario]
    uri = store_uri(args.store)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    print(f"{cpu_model()}, {os.cpu_count()} CPUs; load average at start: {load_average()}")
    if args.scenario == "aa":
        sides = ("+benchmark=relu_small", f"--config-dir={FAKE_CONF}", "compare.a.implementation=relu_as_is",
                 "compare.b.implementation=relu_as_is")  # fmt: skip
        false_alarms(args, uri, "aa-", sides)
    elif args.scenario == "neighbour":
        neighbour(args, uri)
    elif args.scenario == "slowdown":
        slowdown(args, uri)
    else:
        stored(args, uri)
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
