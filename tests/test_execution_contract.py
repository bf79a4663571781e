"""app/execution.py overrides graphql-core's Executor: the signatures it relies on, checked against the
installed graphql-core (pinned to its minor version in pyproject.toml). A change here fails loudly instead of
silently bypassing the overrides (direct completion, compiled queries, the deadline)."""

from __future__ import annotations

import inspect
from importlib.metadata import version

from graphql.execution.executor import Executor
from graphql.pyutils import gather_with_cancel

from app.execution import CompiledExecutionContext, DirectExecutionContext

# Method -> the parameters app/execution.py calls it with (and, for overrides, defines).
CONTRACT = {
    "execute_operation": ["self", "serially"],
    "collect_subfields": ["self", "return_type", "field_details_list"],
    "execute_fields": ["self", "parent_type", "source_value", "path", "grouped_field_set", "position_context"],
    "execute_collected_root_fields": ["self", "root_type", "root_value", "grouped_field_set", "serially",
                                      "new_defer_usages"],
    "execute_field": None,  # called, not overridden: must exist
    "settle_in_background": None,
}


def test_graphql_core_is_the_pinned_minor_version():
    assert version("graphql-core").startswith("3.3."), version("graphql-core")


def test_the_executor_methods_the_overrides_rely_on_keep_their_signatures():
    for name, parameters in CONTRACT.items():
        method = getattr(Executor, name, None)
        assert method is not None, f"graphql-core's Executor has no {name} any more"
        if parameters is not None:
            assert list(inspect.signature(method).parameters) == parameters, (name, inspect.signature(method))
            ours = getattr(CompiledExecutionContext, name)
            assert list(inspect.signature(ours).parameters) == parameters, f"our {name} differs from graphql-core's"
    assert callable(gather_with_cancel)
    assert "is_awaitable" in dir(Executor)


def test_the_schema_executes_with_our_context():
    from app.schema import schema

    assert issubclass(schema.execution_context_class, DirectExecutionContext)
    assert issubclass(DirectExecutionContext, Executor)
