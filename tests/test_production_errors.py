"""What errors tell in production: what was wrong with what the client sent, never a name of the schema it
did not spell itself (a clairvoyance-style probe recovers nothing beyond the operation roots), and an
oversize literal is the client's bad input, not an internal error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import AsyncIterator

import pytest
import pytest_asyncio
from graphql import build_schema, get_named_type, is_enum_type, is_input_object_type, is_object_type

from app.settings import Settings
from tests.conftest import ROOT, Served, serve

pytestmark = pytest.mark.asyncio(loop_scope="session")

QUOTED = re.compile(r"'([^']*)'")
NAME = re.compile(r"[_A-Za-z][_0-9A-Za-z]*")
PUBLIC = {"Query", "Mutation", "Subscription", "String", "Int", "Float", "Boolean", "ID"}


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def production(database_url, statements) -> AsyncIterator[Served]:
    settings = Settings(database_url=database_url, production=True, introspection=False, graphiql=False)
    async for s in serve(database_url, statements, settings):
        yield s


def typo(name: str) -> str:
    return name[:-1] if len(name) > 3 else name + "x"


def probes() -> list[str]:
    """What clairvoyance sends: root fields by a wordlist (near misses and exact names without a
    selection), arguments, enum values, input fields and types by near misses."""
    schema = build_schema(Path(ROOT / "schema.graphql").read_text())
    query = schema.query_type
    documents = ["{ __schema { types { name } } }", "{ __type(name: \"Paper\") { name } }"]
    for name, field in query.fields.items():
        documents.append(f"{{ {typo(name)} }}")
        documents.append(f"{{ {name} }}")  # "must have a selection of subfields" names the type
        documents.append(f"{{ {name}(zzz: 1) {{ __typename }} }}")
        documents.append(f"{{ {name} {{ __typename zzz }} }}")
        documents.append(f"{{ {name} {{ __typename }} }}")  # a required argument is named
        for arg_name, arg in field.args.items():
            documents.append(f"{{ {name}({typo(arg_name)}: 1) {{ __typename }} }}")
            documents.append(f"{{ {name}({arg_name}: 1) {{ __typename }} }}")
            documents.append(f"{{ {name}({arg_name}: {{zzz: 1}}) {{ __typename }} }}")
            named = get_named_type(arg.type)
            if is_enum_type(named):
                value = next(iter(named.values))
                documents.append(f"{{ {name}({arg_name}: {typo(value)}) {{ __typename }} }}")
            if is_input_object_type(named):
                for input_name in named.fields:
                    documents.append(f"{{ {name}({arg_name}: {{{typo(input_name)}: 1}}) {{ __typename }} }}")
                    documents.append(f"{{ {name}({arg_name}: {{{input_name}: {{zzz: 1}}}}) {{ __typename }} }}")
            documents.append(f"query($v: {typo(named.name)}) {{ {name}({arg_name}: $v) {{ __typename }} }}")
            documents.append(f"query($v: Boolean) {{ {name}({arg_name}: $v) {{ __typename }} }}")
        named = get_named_type(field.type)
        if is_object_type(named):
            for sub in list(named.fields)[:8]:
                documents.append(f"{{ {name} {{ {typo(sub)} }} }}")
                documents.append(f"{{ {name} {{ {sub} {{ zzz }} }} }}")
            documents.append(f"{{ {name} {{ ... on {typo(named.name)} {{ __typename }} }} }}")
            documents.append(f"{{ {name} {{ ... on Query {{ __typename }} }} }}")
    return documents


async def test_a_clairvoyance_probe_recovers_no_name_beyond_the_operation_roots(production):
    leaked: dict[str, str] = {}
    messages = 0
    for document in probes():
        answer = await production.client.post("/graphql", json={"query": document})
        assert answer.status_code < 500, (document, answer.text)
        said = set(NAME.findall(document))
        for error in answer.json().get("errors", []):
            messages += 1
            message = error["message"]
            assert "Did you mean" not in message, (document, message)
            for quoted in QUOTED.findall(message):
                for name in NAME.findall(quoted):
                    if name not in said and name not in PUBLIC:
                        leaked[name] = f"{document} -> {message}"
    assert messages > 300  # the probe was answered with errors, and every one of them was read
    assert leaked == {}, leaked


async def test_a_wordlist_in_the_request_does_not_bring_the_types_names_back(production):
    """Errors echo what the request spelled; a wordlist of every type's name in a comment, as aliases or as
    field names made the probe's errors name the types of the fields it probed ("Cannot query field 'x' on type
    'Paper'"), all confirmed in one request. A type's name stays hidden in production whoever spelled it."""
    schema = build_schema(Path(ROOT / "schema.graphql").read_text())
    types = sorted(name for name in schema.type_map if name not in PUBLIC and not name.startswith("__"))
    words = " ".join(types)
    aliases = " ".join(f"{name}: __typename" for name in types)
    documents = [document + " # " + words for document in probes()]
    documents += [document.replace("{ __typename", "{ __typename " + aliases, 1) for document in probes()]
    documents += [f'{{ paper(arxivId: "2402.15627") {{ {words} }} }}',
                  f'{{ paper(arxivId: "2402.15627") {{ inbound(first: 1) {{ {words} }} }} }}',
                  f'query($f: PaperFilter) {{ browsePapers(filter: $f) {{ edges {{ cursor }} }} }} # {words}']
    leaked: dict[str, str] = {}
    for document in documents:
        answer = await production.client.post("/graphql", json={"query": document,
                                                                "variables": {"f": {"zzz": words}}})
        assert answer.status_code < 500, (document, answer.text)
        for error in answer.json().get("errors", []):
            for quoted in QUOTED.findall(error["message"]):
                for name in NAME.findall(quoted):
                    if name in types:
                        leaked[name] = f"{document[:200]} -> {error['message']}"
    assert leaked == {}, leaked


async def test_suggestions_of_every_kind_are_left_out_in_production(production):
    for document, variables in [
        ('{ papr(arxivId: "x") { title } }', None),
        ('{ paper(arxivID: "x") { title } }', None),
        ("{ browsePapers(orderBy: ARXIV) { edges { cursor } } }", None),
        ("query($f: PaperFiltr) { browsePapers(filter: $f) { edges { cursor } } }", None),
        ('{ browsePapers(filter: {categry: "x"}) { edges { cursor } } }', None),
        ("query($o: PaperOrder) { browsePapers(orderBy: $o) { edges { cursor } } }", {"o": "ARXIV"}),
        ("query($f: PaperFilter) { browsePapers(filter: $f) { edges { cursor } } }", {"f": {"categry": "x"}}),
    ]:
        answer = await production.client.post("/graphql", json={"query": document, "variables": variables})
        errors = answer.json()["errors"]
        assert errors and all("Did you mean" not in e["message"] for e in errors), (document, errors)


async def test_with_introspection_on_a_production_error_names_what_is_allowed(database_url, statements):
    """PITH_INTROSPECTION=1 makes the schema public: hiding the enum and its values from an error then hid
    nothing from anyone but the client reading it ("Value 'RESOLVED' does not exist in '...' enum")."""
    settings = Settings(database_url=database_url, production=True, introspection=True, graphiql=False)
    async for s in serve(database_url, statements, settings):
        answer = await s.client.post("/graphql", json={
            "query": '{ paper(arxivId: "2402.15627") { inbound(first: 1, status: [RESOLVED]) { totalCount } } }'})
        (error,) = answer.json()["errors"]
        assert "ResolutionStatus" in error["message"], error
        answer = await s.client.post("/graphql", json={"query": '{ papr(arxivId: "x") { title } }'})
        assert "Did you mean 'paper'" in answer.json()["errors"][0]["message"]


async def test_an_oversize_literal_is_bad_user_input(production, served):
    for client in (production.client, served.client):  # in production and out of it
        for literal in ("9" * 4301, "-" + "9" * 5000, "9" * 20):
            document = f'{{ paper(arxivId: "2402.15627") {{ inbound(first: {literal}) {{ totalCount }} }} }}'
            answer = await client.post("/graphql", json={"query": document})
            assert answer.status_code < 500, answer.text
            codes = {e["extensions"]["code"] for e in answer.json()["errors"]}
            assert codes == {"BAD_USER_INPUT"}, (literal[:10], answer.json())
            assert "internal" not in answer.text
        # Every literal its type cannot read is the client's input; a variable never used or not defined is
        # the document's fault (validation).
        for document, code in [
            ('{ paper(arxivId: "2402.15627") { inbound(first: 99999999999999999999999999999) { totalCount } } }',
             "BAD_USER_INPUT"),
            ('{ paper(arxivId: "2402.15627") { inbound(first: -99999999999999999999) { totalCount } } }',
             "BAD_USER_INPUT"),
            ('{ paper(arxivId: "2402.15627") { inbound(first: 1e400) { totalCount } } }', "BAD_USER_INPUT"),
            ("{ paper(arxivId: 5) { title } }", "BAD_USER_INPUT"),
            ("{ browsePapers(orderBy: 7) { edges { cursor } } }", "BAD_USER_INPUT"),
            ("query($x: Int) { __typename }", "GRAPHQL_VALIDATION_FAILED"),
            ("{ paper(arxivId: $y) { title } }", "GRAPHQL_VALIDATION_FAILED"),
        ]:
            answer = await client.post("/graphql", json={"query": document})
            codes = {e["extensions"]["code"] for e in answer.json()["errors"]}
            assert codes == {code}, (document, answer.json())
        answer = await client.post("/graphql", json={"query": f'{{ node(id: {"9" * 4301}) {{ id }} }}'})
        assert answer.status_code < 500 and "INTERNAL" not in answer.text, answer.text
        answer = await client.post("/graphql", json={"query": '{ paper(arxivId: "x", asOf: 1e400) { title } }'})
        assert answer.status_code < 500 and "INTERNAL" not in answer.text, answer.text
    # Told as the client's own error: the 4,301-digit Int is BAD_USER_INPUT.
    answer = await production.client.post("/graphql", json={
        "query": f'{{ paper(arxivId: "2402.15627") {{ inbound(first: {"9" * 4301}) {{ totalCount }} }} }}'})
    (error,) = answer.json()["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT" and "4301 characters" in error["message"], error
    # In the variables (valid JSON that int() refuses past 4,300 digits): the variable's own refusal.
    document = 'query($n: Int) { paper(arxivId: "2402.15627") { inbound(first: $n) { totalCount } } }'
    answer = await production.client.post("/graphql", content=b'{"query": "%s", "variables": {"n": %s}}' % (
        document.replace('"', '\\"').encode(), b"9" * 4301), headers={"content-type": "application/json"})
    (error,) = answer.json()["errors"]
    assert error["extensions"]["code"] == "BAD_USER_INPUT" and "$n" in error["message"], error
    assert "an integer of 4301 digits" in error["message"], error
    answer = await production.client.get("/graphql", params={"query": document, "variables": '{"n": %s}' % ("9" * 4301)})
    assert answer.json()["errors"][0] == {**error, "extensions": {**error["extensions"],
                                                                   "requestId": answer.headers["x-request-id"]}}
    # Nested deeper than the reader goes: 400, saying so.
    answer = await production.client.post("/graphql", content=b'{"query": "{ __typename }", "variables": %s}' % (
        b"[" * 5000 + b"]" * 5000), headers={"content-type": "application/json"})
    assert answer.status_code == 400 and "nest too deeply" in answer.json()["errors"][0]["message"], answer.text


async def test_schemathesis_finds_no_server_errors_in_production(database_url, tmp_path):
    """schemathesis in GraphQL mode from the schema file (introspection is off in production), fixed examples
    and seed, against `pith-graph serve` with PITH_ENV=production: every case through the production pipeline
    (hidden suggestions, the shape check, charged refusals), none answered 5xx."""
    import asyncio
    import os
    import subprocess
    import sys

    from tests.conftest import LiveServer

    examples = os.environ.get("PITH_FUZZ_EXAMPLES", "25")
    server = LiveServer(database_url, env={"PITH_ENV": "production", "PITH_ANONYMOUS_POINTS_PER_HOUR": "0"})
    try:
        cli = Path(sys.executable).parent / "schemathesis"
        done = await asyncio.to_thread(
            subprocess.run, [str(cli), "run", str(ROOT / "schema.graphql"), "--url", server.base + "/graphql",
                             "--max-examples", examples, "--seed", "20261201", "--checks", "not_a_server_error",
                             "--workers", "1"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    summary = re.search(r"(\d+) generated, (\d+) passed", done.stdout)
    assert summary and summary.group(1) == summary.group(2) and int(summary.group(1)) >= int(examples), \
        done.stdout[-2000:]
