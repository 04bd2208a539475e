"""The one summary table of ``bench/gpu_check.sh``: what each check of a GPU machine gave, beside its target,
from the files the script left in its output folder (any missing file: that check did not run).

    python bench/gpu_summary.py $OUT        # prints the table and writes $OUT/summary.md

Files read: ``steps.tsv`` (each step's name, exit status, seconds), ``native.log`` (cmake's family summary),
``ctest.log``, ``pytest_gpu.log``, ``evaluations.csv`` (bench/prediction_error.py --out), ``vendor.csv``
(bench/vendor_vs_torch.py --output) and ``allreduce_out.csv`` (the collectives executable at world size 1).
Targets (issue 42): prediction |error| mean <= 10%, max <= 15% over the six evaluations; native cuDNN conv /
torch <= 1.05 per layer in fp32 and bf16.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

#: native / torch per layer at most this (issue 25, kept by issue 42 for the convolutions in fp32 and bf16)
RATIO_TARGET = 1.05
ERROR_MEAN_TARGET, ERROR_MAX_TARGET = 10.0, 15.0


def _text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def build_rows(out: Path) -> list[dict[str, str]]:
    rows = []
    log = _text(out / "native.log")
    if log is not None:
        built = re.findall(r"built +(cuda[^\n]*)", log)
        skipped = re.findall(r"SKIPPED +(cuda[^\n]*)", log)
        value = "; ".join(built + [f"SKIPPED {s}" for s in skipped])
        rows.append({"check": "native CUDA family", "value": value, "target": "cuda_gemm and cuda_conv built",
                     "verdict": _verdict(bool(built) and not skipped)})  # fmt: skip
    for name, path, pattern in (
        ("ctest (verify modes)", "ctest.log", r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)"),
        ("pytest -m gpu", "pytest_gpu.log", r"(\d+) (?:passed|failed)[^\n]*in [\d.]+s"),
    ):
        text = _text(out / path)
        if text is None:
            continue
        found = re.findall(pattern, text)
        last = text.strip().splitlines()[-1] if text.strip() else ""
        if name.startswith("ctest") and found:
            _, failed, total = found[-1]
            rows.append({"check": name, "value": f"{int(total) - int(failed)}/{total} passed", "target": "all pass",
                         "verdict": _verdict(failed == "0")})  # fmt: skip
        else:
            ok = bool(found) and " failed" not in last and " error" not in last
            rows.append({"check": name, "value": last[-80:], "target": "all pass", "verdict": _verdict(ok)})
    return rows


def evaluation_rows(out: Path) -> list[dict[str, str]]:
    path = out / "evaluations.csv"
    if not path.is_file():
        return []
    table = pd.read_csv(path)
    rows = []
    for r in table.itertuples(index=False):
        error = getattr(r, "prediction_error_pct", float("nan"))
        rows.append({"check": f"evaluate {r.model} bs{r.batch_size}",
                     "value": f"predicted {r.step_time_predicted_ms:.3g} ms, measured {r.step_time_measured_ms:.3g} "
                              f"ms: {error:+.1f}%", "target": f"|error| <= {ERROR_MAX_TARGET:g}%",
                     "verdict": _verdict(abs(error) <= ERROR_MAX_TARGET)})  # fmt: skip
    errors = table["prediction_error_pct"].dropna().abs() if "prediction_error_pct" in table else pd.Series([])
    if len(errors):
        ok = errors.mean() <= ERROR_MEAN_TARGET and errors.max() <= ERROR_MAX_TARGET and len(errors) == 6
        rows.append({"check": "prediction over the evaluations",
                     "value": f"mean |error| {errors.mean():.1f}%, max {errors.max():.1f}% ({len(errors)} of 6)",
                     "target": f"mean <= {ERROR_MEAN_TARGET:g}%, max <= {ERROR_MAX_TARGET:g}%, 6 evaluations",
                     "verdict": _verdict(ok)})  # fmt: skip
    return rows


def vendor_rows(out: Path) -> list[dict[str, str]]:
    path = out / "vendor.csv"
    if not path.is_file():
        return []
    table = pd.read_csv(path)
    rows = []
    for (op, precision), group in table.groupby(["op", "precision"], sort=False):
        ratios = group["ratio_heuristic"].dropna()
        if not len(ratios):
            rows.append({"check": f"{op} {precision} native/torch", "value": "no native result",
                         "target": "-", "verdict": "FAIL"})  # fmt: skip
            continue
        worst = group.loc[ratios.idxmax()]
        over = int((ratios > RATIO_TARGET).sum())
        held = op == "conv" and precision in ("fp32-ieee", "bf16")  # the target; the rest are reported
        rows.append({
            "check": f"{op} {precision} native/torch",
            "value": f"median {ratios.median():.3f}, max {ratios.max():.3f} ({worst['layer']} {worst['mode']}), "
                     f"{over}/{len(group)} over {RATIO_TARGET:g}",
            "target": f"<= {RATIO_TARGET:g} per layer" if held else "reported",
            "verdict": _verdict(over == 0 and len(ratios) == len(group)) if held else "-",
        })  # fmt: skip
    return rows


def allreduce_rows(out: Path) -> list[dict[str, str]]:
    path = out / "allreduce_out.csv"
    if not path.is_file():
        return []
    table = pd.read_csv(path)
    if table.empty:
        return [{"check": "NCCL all-reduce, 1 rank", "value": "no row", "target": "runs", "verdict": "FAIL"}]
    largest = table.loc[table["id"].idxmax()]
    return [{"check": "NCCL all-reduce, 1 rank", "value": f"{len(table)} sizes; largest: {largest['ms']:.3g} ms, "
             f"algbw {largest['algbw_gbs']:.1f} GB/s, busbw {largest['busbw_gbs']:.1f} GB/s (0 at one rank)",
             "target": "runs", "verdict": "ok"}]  # fmt: skip


def step_rows(out: Path) -> list[dict[str, str]]:
    path = out / "steps.tsv"
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        name, status, seconds = (line.split("\t") + ["", ""])[:3]
        if status != "0":
            what = "skipped: the time budget was spent" if status == "skipped" else f"exit status {status}"
            rows.append({"check": f"step {name}", "value": f"{what} ({seconds} s)", "target": "ran",
                         "verdict": "FAIL"})  # fmt: skip
    return rows


def _verdict(ok: bool) -> str:
    return "ok" if ok else "FAIL"


def summary(out: Path) -> pd.DataFrame:
    rows = build_rows(out) + evaluation_rows(out) + vendor_rows(out) + allreduce_rows(out) + step_rows(out)
    return pd.DataFrame(rows, columns=["check", "value", "target", "verdict"])


def markdown(table: pd.DataFrame) -> str:
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(str(v).replace("|", "/") for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the output folder of bench/gpu_check.sh")
    args = parser.parse_args(argv)
    table = summary(args.out)
    text = markdown(table)
    (args.out / "summary.md").write_text(text, encoding="utf-8")
    print(text, end="")
    failed = int((table["verdict"] == "FAIL").sum())
    print(f"gpu check: {len(table)} checks, {failed} failed")
    return 1 if failed or table.empty else 0


if __name__ == "__main__":
    sys.exit(main())
