"""ruff and mypy with a ratchet: no file may gain findings of a kind it did not have.

    python scripts/ratchet.py            # check against .ci/lint-baseline.json (exit 1 on a new finding)
    python scripts/ratchet.py --update   # write the baseline from the tree as it is (after a clean-up)

The baseline counts findings per (tool, file, code). A count that drops is reported so the baseline can
be lowered with --update; a count that rises, or a new (file, code), fails with the findings listed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / ".ci" / "lint-baseline.json"
PATHS = ["app", "loaders"]
MYPY_LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: (?P<message>.*?)(?:  \[(?P<code>[\w-]+)\])?$")


def ruff() -> list[tuple[str, str, str]]:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format=json", "--no-cache", *PATHS],
                          cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"ruff failed: {done.stderr[-2000:]}")
    found = []
    for item in json.loads(done.stdout or "[]"):
        path = str(Path(item["filename"]).resolve().relative_to(ROOT))
        where = f"{path}:{item['location']['row']}"
        found.append((f"ruff {path}", item["code"] or "syntax", f"{where}: {item['code']} {item['message']}"))
    return found


def mypy() -> list[tuple[str, str, str]]:
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--hide-error-context",
                           "--no-pretty", "--show-error-codes", *PATHS], cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):
        raise SystemExit(f"mypy failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    found = []
    for line in done.stdout.splitlines():
        match = MYPY_LINE.match(line)
        if match:
            found.append((f"mypy {match['file']}", match["code"] or "error", line))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="write the baseline from the tree as it is")
    args = parser.parse_args()
    findings = ruff() + mypy()
    counts = Counter(f"{where} {code}" for where, code, _ in findings)
    if args.update:
        BASELINE.write_text(json.dumps(dict(sorted(counts.items())), indent=1) + "\n")
        print(f"baseline: {sum(counts.values())} findings in {len(counts)} (tool, file, code) groups")
        return 0
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    worse = {key: n for key, n in counts.items() if n > baseline.get(key, 0)}
    better = {key: n for key, n in baseline.items() if counts.get(key, 0) < n}
    for key in sorted(worse):
        print(f"new: {key}: {baseline.get(key, 0)} -> {counts[key]}")
        for where, code, text in findings:
            if f"{where} {code}" == key:
                print(f"    {text}")
    if better:
        print(f"{len(better)} groups have fewer findings than the baseline: `python scripts/ratchet.py --update` "
              "lowers it")
    print(f"ruff + mypy: {sum(counts.values())} findings, baseline {sum(baseline.values())}; "
          f"{'no new findings' if not worse else str(len(worse)) + ' groups with new findings'}")
    return 1 if worse else 0


if __name__ == "__main__":
    raise SystemExit(main())
