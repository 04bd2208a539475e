"""How far the machine's drift moves one operation against another in a sweep measured in R rounds: a
simulation behind the argument in ``dlbench/operators/rounds.py`` (no measurement; no torch).

The machine's log-speed wanders (an Ornstein-Uhlenbeck process: standard deviation ``--sd``, correlation time
tau) or moves linearly (``--linear``: ``--sd`` over the sweep). 23 operations with shares of 0.5-2 units of
time fill a sweep of ``--length`` seconds; in each of R rounds every operation gets 1/R of its share in a new
shuffled order (``--pairs``: a shuffled order, then its reverse), is sampled ``--samples`` times per share,
and its figure is the median of all its samples, as dlbench pools them. Printed per tau and R: the median
over ``--trials`` sweeps of the median over operations of |figure - the sweep's median figure| (one sweep;
two sweeps compared carry about sqrt(2) times it).

    python bench/rounds_simulation.py
    python bench/rounds_simulation.py --linear --sd 0.10 --pairs
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections.abc import Callable


def wandering(rng: random.Random, length: float, tau: float, sd: float, dt: float = 0.05) -> Callable[[float], float]:
    a = math.exp(-dt / tau)
    b = sd * math.sqrt(1 - a * a)
    x, path = rng.gauss(0, sd), []
    for _ in range(int(length / dt) + 2):
        path.append(x)
        x = a * x + b * rng.gauss(0, 1)
    return lambda t: path[min(int(t / dt), len(path) - 1)]


def spread(rounds: int, tau: float, args: argparse.Namespace, rng: random.Random) -> float:
    per_trial = []
    for _ in range(args.trials):
        shares = [rng.uniform(0.5, 2.0) for _ in range(args.operations)]
        scale = args.length / sum(shares) / rounds
        shares = [d * scale for d in shares]
        if args.linear:
            drift = lambda t: args.sd * t / args.length  # noqa: E731
        else:
            drift = wandering(rng, args.length * 1.2, tau, args.sd)
        orders: list[list[int]] = []
        while len(orders) < rounds:
            orders.append(rng.sample(range(args.operations), args.operations))
            if args.pairs and len(orders) < rounds:
                orders.append(orders[-1][::-1])
        t, samples = 0.0, [[] for _ in range(args.operations)]
        for order in orders:
            for i in order:
                k = args.samples
                samples[i] += [drift(t + shares[i] * (j + 0.5) / k) for j in range(k)]
                t += shares[i]
        figures = [statistics.median(s) for s in samples]
        centre = statistics.median(figures)
        per_trial.append(statistics.median(abs(f - centre) for f in figures))
    return statistics.median(per_trial)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sd", type=float, default=0.05)
    parser.add_argument("--length", type=float, default=60.0)
    parser.add_argument("--operations", type=int, default=23)
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--linear", action="store_true")
    parser.add_argument("--pairs", action="store_true")
    args = parser.parse_args()
    taus = [math.inf] if args.linear else [2.0, 10.0, 30.0, 120.0]
    counts = (1, 2, 4, 8, 16)
    print("tau (s)  " + "".join(f"{'R=' + str(r):>9}" for r in counts))
    for tau in taus:
        cells = [f"{100 * spread(r, tau, args, random.Random(1)):8.2f}%" for r in counts]
        print(f"{'linear' if args.linear else tau:<9}" + "".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
