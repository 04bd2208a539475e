"""False alarms and power of ``task=compare`` (issue 40's targets), on the distinct ResNet-50 convolutions
(``conf/benchmark/conv.yaml``, 23 operations) at threads=1:

1. **False alarms**: two identical sweeps (the embedded torch backend) back to back, compared at the default
   threshold (2%): at most 1 of 23 operations, and not the total, called ``faster`` or ``slower``; in each of
   ``--pairs`` repetitions of the pair.
2. **Power**: a sweep against the same sweep with a real 10% slowdown on a known half of the operations: the
   even ids' H made 1.1 times larger (``bench/compare_conf/scaled.py`` runs the torch kernel's own command line
   on the changed rows; both sides go through it); at least 90% of the changed operations called ``slower``, at
   most 1 unchanged operation called changed. The measured ratio of each changed operation is printed (a 10%
   larger H is about 10% more work; the kernel's real slowdown is what the interval is about).

Each comparison is printed twice: the verdicts as ``task=compare`` gives them (an operation measured on a busy
machine or contended is ``unsure``, whatever its interval), and the verdicts of the intervals alone (those marks
ignored), labelled as such, so that a loaded machine still shows what the intervals say. The load average is
printed before and after each sweep; a figure from a busy machine is not the targets' test.

    python bench/compare_power.py                  # 3 pairs + the power pair, batch 1, threads 1
    python bench/compare_power.py --pairs 1 --store /tmp/power/mlflow.db
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from _common import ROOT, STORE_HELP, load_average, store_uri

from dlbench.analysis.comparison.change import ChangeSettings, is_total, verdict_counts
from dlbench.analysis.comparison.sides import Pair, Recorded, changes_of_pairs, probe_ratio, protocol_reader
from dlbench.tracking.store import download_artifact, resolve_tracking, search_runs

EXPERIMENT = "compare-power"
CONF = ROOT / "bench" / "compare_conf"


def sweep(label: str, backend: str, args: argparse.Namespace, uri: str) -> str:
    """One conv sweep; its run id."""
    name = f"power-{label}-{int(time.time())}"
    command = [sys.executable, "-m", "dlbench", "+benchmark=conv", f"backend={backend}", f"--config-dir={CONF}",
               f"threads={args.threads}", f"batch_size={args.batch}", f"mlflow.tracking_uri={uri}",
               f"mlflow.experiment={EXPERIMENT}", f"mlflow.run_name={name}", "quiet=true"]  # fmt: skip
    print(f"{label}: load before {load_average()}", flush=True)
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)  # noqa: S603
    if result.returncode != 0:
        raise SystemExit(f"{label} failed:\n{result.stderr[-2000:]}")
    runs = search_runs(resolve_tracking(uri, EXPERIMENT), f"tags.`mlflow.runName` = '{name}'", [EXPERIMENT])
    noisy = runs["tags.dlbench.noisy"].iloc[0] if "tags.dlbench.noisy" in runs else "?"
    print(f"{label}: load after {load_average()}; dlbench.noisy={noisy}", flush=True)
    return str(runs["run_id"].iloc[0])


def judged(a: str, b: str, uri: str, unmarked: bool) -> pd.DataFrame:
    """changes.csv of B against A; ``unmarked``: the busy and contended marks ignored (intervals alone)."""
    read = protocol_reader(resolve_tracking(uri, EXPERIMENT), lambda _: False)

    def reader(run_id: str) -> Recorded:
        recorded = read(run_id)
        return Recorded(recorded.samples, recorded.operations.assign(why="")) if unmarked else recorded

    return changes_of_pairs([Pair("conv", (a,), (b,))], reader, ChangeSettings())


def report(title: str, a: str, b: str, uri: str) -> dict[str, pd.DataFrame]:
    from dlbench.analysis.comparison.runs import run_table

    runs = run_table(search_runs(resolve_tracking(uri, EXPERIMENT), "", [EXPERIMENT]))
    print(f"{title}: reference probe B / A {probe_ratio(runs, [a], [b]):.3f} (the machine's speed between the sweeps)")
    out = {}
    for unmarked in (False, True):
        changes = judged(a, b, uri, unmarked)
        counts = verdict_counts(changes)
        total = changes[is_total(changes["operation"])].iloc[0]
        label = "intervals alone (busy/contended marks ignored)" if unmarked else "as task=compare gives them"
        print(f"{title}, {label}: {counts}; total {total.ratio:.3f} ({total.low:.3f}-{total.high:.3f}) "
              f"{total.verdict}")  # fmt: skip
        out["unmarked" if unmarked else "marked"] = changes
    return out


def even_keys(run_id: str, uri: str) -> set[str]:
    with tempfile.TemporaryDirectory() as tmp:
        results = pd.read_csv(download_artifact(resolve_tracking(uri, EXPERIMENT), run_id, "results.csv", Path(tmp)))
    return set(results.loc[results["id"] % 2 == 0, "key"].astype(str))


def power_figures(changes: pd.DataFrame, changed: set[str]) -> str:
    ops = changes[~is_total(changes["operation"])]
    moved = ops[ops["operation"].isin(changed)]
    still = ops[~ops["operation"].isin(changed)]
    caught = int((moved["verdict"] == "slower").sum())
    false = int(still["verdict"].isin(["slower", "faster"]).sum())
    return (f"{caught} of {len(moved)} changed operations called slower ({caught / max(len(moved), 1):.0%}, "
            f"target >= 90%); {false} of {len(still)} unchanged called changed (target <= 1)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--store", default=str(ROOT / ".dlbench" / "bench" / "compare_power" / "mlflow.db"), help=STORE_HELP
    )
    parser.add_argument("--no-power", action="store_true", help="only the false-alarm pairs")
    args = parser.parse_args()
    uri = store_uri(args.store)
    print(f"load average at start: {load_average()}")
    for index in range(args.pairs):
        a, b = sweep(f"pair{index + 1}-A", "torch", args, uri), sweep(f"pair{index + 1}-B", "torch", args, uri)
        for kind, changes in report(f"false alarms, pair {index + 1}", a, b, uri).items():
            ops = changes[~is_total(changes["operation"])]
            called = int(ops["verdict"].isin(["slower", "faster"]).sum())
            total = changes[is_total(changes["operation"])]["verdict"].iloc[0]
            print(f"  {kind}: {called} of {len(ops)} operations called changed (target <= 1), total {total}")
    if not args.no_power:
        a, b = sweep("power-A", "conv_as_is", args, uri), sweep("power-B", "conv_slowed", args, uri)
        changed = even_keys(a, uri)
        for kind, changes in report("power", a, b, uri).items():
            print(f"  {kind}: {power_figures(changes, changed)}")
            moved = changes[changes["operation"].isin(changed)]
            print("  changed operations' measured ratios: " + ", ".join(f"{r:.3f}" for r in moved["ratio"]))
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
