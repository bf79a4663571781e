"""The printed schema matches the code, and everything in it is described."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_schema_file_is_what_the_code_prints():
    from app.schema import schema

    printed = subprocess.run([sys.executable, "-m", "strawberry", "export-schema", "app.schema:schema"],
                             capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert (ROOT / "schema.graphql").read_text() == printed, \
        "regenerate: strawberry export-schema app.schema:schema --output schema.graphql"
    assert str(schema).strip() == printed.strip()


def test_every_type_and_field_has_a_description():
    from graphql import GraphQLObjectType

    from app.schema import schema

    missing = []
    for name, t in schema._schema.type_map.items():
        if name.startswith("__") or name in ("String", "Int", "Boolean", "ID", "Float"):
            continue
        if not t.description:
            missing.append(name)
        if isinstance(t, GraphQLObjectType):
            for fname, f in t.fields.items():
                if not f.description:
                    missing.append(f"{name}.{fname}")
                for aname, a in f.args.items():
                    if not a.description:
                        missing.append(f"{name}.{fname}({aname})")
    assert missing == []
