"""``python -m experiments.validation [NAME_PREFIX ...]``: published vs predicted, with errors."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence

from experiments.validation.record import all_records, relative_error


def main(argv: Sequence[str] | None = None) -> int:
    """Print every record (or those whose name starts with one of ``argv``); 1 if any misses."""
    prefixes = list(sys.argv[1:] if argv is None else argv)
    records = [r for r in all_records() if not prefixes or r.name.startswith(tuple(prefixes))]
    print(f"{'record':<44} {'kind':<8} {'published':>12} {'predicted':>12} {'error':>8} {'tol':>6}")
    misses = 0
    errors: dict[str, list[float]] = {"ratio": [], "absolute": []}
    for r in records:
        predicted = r.predict()
        err = relative_error(predicted, r.published)
        errors[r.kind].append(abs(err))
        flag = "" if abs(err) <= r.tolerance else "  MISS"
        if r.known_miss:
            flag += f"  (known: {r.known_miss})"
        misses += abs(err) > r.tolerance and not r.known_miss
        print(f"{r.name:<44} {r.kind:<8} {r.published:>12.4g} {predicted:>12.4g} {err:>+8.1%} "
              f"{r.tolerance:>6.0%}{flag}")
        print(f"    {r.source}; {r.quantity}")
    for kind, values in errors.items():
        if values:
            print(f"{kind}: {len(values)} records, median |error| {statistics.median(values):.1%}, "
                  f"max {max(values):.1%}")
    return 1 if misses else 0


if __name__ == "__main__":
    raise SystemExit(main())
