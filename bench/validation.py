"""Validation time of the worst documents the shape limits admit (app/shape.py), and of the attack
documents they refuse (refused in the linear shape pass before validation runs).

    python bench/validation.py            # prints a table; writes bench/results/validation.json

No database: parse, the shape check and graphql-core's validation with the server's rules, in process.
Each figure is the median of 5 runs on the machine as it is (say what load it had).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from graphql import parse, specified_rules  # noqa: E402

from app.cost import _validated  # noqa: E402
from app.limits import MAX_COMPARISONS, MAX_FIELDS, MAX_TOKENS  # noqa: E402
from app.schema import LIMIT_RULES, make_schema  # noqa: E402
from app.shape import shape_problem  # noqa: E402

RULES = (*specified_rules, *LIMIT_RULES)
R, F = 10, MAX_FIELDS


def documents() -> dict[str, str]:
    leaves = '{ paper(arxivId: "x") { ' + " title" * 100 + " } }"
    objects = "{ " + ' paper(arxivId: "x") { title }' * 30 + " }"
    nested = "{ " + " ".join(['paper(arxivId: "x") { ' + " ".join(
        ["inbound(first: 1) { " + " ".join(["edges { cursor cursor }"] * 2) + " }"] * 3) + " }"] * 3) + " }"
    relay = '{ paper(arxivId: "x") { ' + " ".join(f"...a{i}" for i in range(60)) + " } } " + \
        "".join(f"fragment a{i} on Paper {{ arxivId title }} " for i in range(60))
    wide = "{ " + " ".join(f'p{i}: paper(arxivId: "x") {{ arxivId title latestVersion primaryCategory '
                           'inbound(first: 10) { totalCount edges { cursor node { observationId } } } }'
                           for i in range(30)) + " }"
    return {
        # admitted: the costliest shapes within the limits
        "100 x title in one set (leaf repeats)": leaves,
        "30 x paper{title} in one set": objects,
        "3 x paper{3 x inbound{2 x edges{2 x cursor}}}": nested,
        "60 fragments each arxivId title (Relay)": relay,
        "30 aliases, 10 fields each (ordinary)": wide,
        # every field unknown, each name distinct (what a cache of documents cannot hold): each is an error,
        # up to MAX_VALIDATION_ERRORS, and the rules that walk the whole operation (variables) walk them all
        f"{F - 10} distinct unknown fields": "{ d1 " + " ".join(f"f{i:010d}" for i in range(F - 10)) + " }",
        f"{F - 10} distinct unknown fields and a variable": 'query($v: String) { paper(arxivId: $v) { title } '
        + " ".join(f"f{i:010d}" for i in range(F - 11)) + " }",
        # the attacks of the table: refused by the shape check before validation
        "attack: 990 distinct unknown fields (12 kB)": "{ d1 " + " ".join(f"f{i:010d}" for i in range(990)) + " }",
        "attack: 4,989 x a": "{ d1 " + " a" * 4989 + " }",
        "attack: __typename + 550 x paper{title}": "{ __typename " + ' paper(arxivId: "x") { title }' * 550 + " }",
        "attack: 200 fragments each paper{title}": "{ " + " ".join(f"...h{i}" for i in range(200)) + " } "
        + "".join(f'fragment h{i} on Query {{ paper(arxivId: "x") {{ title }} }} ' for i in range(200)),
    }


def run() -> dict[str, dict]:
    schema = make_schema(production=True, introspection=False)._schema
    out = {}
    for label, text in documents().items():
        timings, refused, errors = [], None, 0
        for _ in range(5):
            started = time.perf_counter()
            document = parse(text, max_tokens=MAX_TOKENS)
            problem = shape_problem(document)
            if problem is None:
                errors = len(_validated.__wrapped__(schema, document, RULES, True))  # type: ignore[attr-defined]
            refused = problem.message if problem is not None else None
            timings.append(time.perf_counter() - started)
        out[label] = {"bytes": len(text), "median_ms": round(statistics.median(timings) * 1000, 2),
                      "max_ms": round(max(timings) * 1000, 2), "refused": refused, "validation_errors": errors}
    return out


if __name__ == "__main__":
    figures = run()
    print(f"limits: MAX_FIELDS {MAX_FIELDS}, MAX_COMPARISONS {MAX_COMPARISONS}, MAX_TOKENS {MAX_TOKENS}")
    for label, row in figures.items():
        print(f"{row['median_ms']:9.2f} ms  (max {row['max_ms']:8.2f})  {row['bytes']:6d} B  "
              f"{'refused' if row['refused'] else 'validated'}  {label}")
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    (results / "validation.json").write_text(json.dumps(figures, indent=2) + "\n")
