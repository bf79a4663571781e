"""Execution without per-field machinery where a field has nothing to run: the leaf-heavy lists.

graphql-core resolves every field through its resolver: Strawberry's wrappers, a ResolveInfo, a
Path, an awaitable check. For a page of 100 edges that is hundreds of calls per request that only
read an attribute. A field qualifies for the direct path when Strawberry gives it no resolver (a
plain attribute) or a synchronous resolver that takes nothing but `self`, it has no arguments,
directives or field extensions, and no resolve middleware is installed. Its value is read and
completed right here: leaves serialized by their type, objects by the same rule recursively.
Anything else (and any value the direct path cannot complete, such as a null in a non-null field)
goes the ordinary way, so errors are what graphql-core makes of them.
"""

from __future__ import annotations

import asyncio
import operator
import warnings
from typing import Any, Callable

from graphql import ExecutionResult, GraphQLObjectType, is_leaf_type, is_non_null_type
from graphql.pyutils import Path
from graphql.pyutils import Undefined as _UNDEFINED
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from loaders.base import Turns

# An operation cancelled (its client gone, its deadline, the server's stop) can cancel a task of the execution before
# its first step: the coroutine the task was to run is closed unstarted, and the execution's coroutines it held (a
# field's resolver, a list's items, a selection's fields) are dropped unstarted too, each logged by Python as
# "coroutine ... was never awaited" (graphql-core's gather_with_cancel, graphql-core#217). None of them ran, so
# nothing is lost: what is said of them is silenced, for the execution's own coroutines alone.
warnings.filterwarnings(
    "ignore", r"coroutine '(Executor|DirectExecutionContext|CompiledExecutionContext|GraphQLCoreConverter)\.[\w.<>]+' "
              r"was never awaited", RuntimeWarning)

_NOT_PLAIN = object()
LONG_LIST = 50  # lists longer than this complete in stretches (app.limits.STRETCH_SECONDS)
_getters: dict[GraphQLObjectType, dict[str, Callable[[Any], Any]]] = {}


def _getter(field: Any) -> Callable[[Any], Any] | None:
    definition = field.extensions.get("strawberry-definition") if field.extensions else None
    if definition is None or field.args or definition.extensions or getattr(definition, "directives", None):
        return None
    if getattr(definition, "permission_classes", None):
        return None
    resolver = definition.base_resolver
    if resolver is None:
        return operator.attrgetter(definition.python_name)
    if resolver.is_async or resolver.arguments or resolver.info_parameter is not None \
            or resolver.root_parameter is not None:
        return None
    func = resolver.wrapped_func
    if not callable(func) or resolver.self_parameter is None:
        return None
    return func  # a method: called with the source object as `self`


def plain_fields(parent_type: GraphQLObjectType) -> dict[str, Callable[[Any], Any]]:
    found = _getters.get(parent_type)
    if found is None:
        found = {name: g for name, field in parent_type.fields.items() if (g := _getter(field)) is not None}
        _getters[parent_type] = found
    return found


# Collected sub-fields outlive one execution: a subscription executes its selection once per event, and
# many subscribers share a document (the parse cache gives them the same nodes). The key holds what the
# collection depends on (type, nodes, fragments, variable values) and keeps those nodes alive.
_SUBFIELDS: dict[tuple, tuple] = {}
_SUBFIELDS_MAX = 4096


class DirectExecutionContext(StrawberryGraphQLCoreExecutionContext):
    def execute_operation(self, serially=None):  # type: ignore[override]
        """The operation within its deadline (the context's deadline_at): past it, the operation is
        cancelled (its statements with it; the transport's session close returns the connection) and
        answered with a TIMEOUT error. Subscription events each get a deadline of their own."""
        result = super().execute_operation(serially)
        context = self.context_value
        deadline = getattr(context, "deadline_at", None)
        if deadline is None or not self.is_awaitable(result):
            return result

        async def bounded() -> Any:
            from app.errors import deadline_error

            try:
                async with asyncio.timeout_at(deadline):
                    return await result
            except TimeoutError:
                return ExecutionResult(data=None, errors=[deadline_error(context.deadline_seconds)])

        return bounded()

    def collect_subfields(self, return_type, field_details_list):  # type: ignore[override]
        try:
            coerced = getattr(self.variable_values, "coerced", None) or {}
            variables = tuple(sorted((k, repr(v)) for k, v in coerced.items()))
        except Exception:  # noqa: BLE001 - anything unusual: collect as graphql-core does
            return super().collect_subfields(return_type, field_details_list)
        # The operation node stands for its document (and so its fragments): the parse cache shares it.
        key = (return_type, tuple(id(d.node) for d in field_details_list), id(self.operation), variables)
        found = _SUBFIELDS.get(key)
        if found is not None:
            return found[1]
        collected = super().collect_subfields(return_type, field_details_list)
        if len(_SUBFIELDS) >= _SUBFIELDS_MAX:
            _SUBFIELDS.clear()
        _SUBFIELDS[key] = ((field_details_list, self.operation), collected)
        return collected

    def execute_fields(self, parent_type, source_value, path, grouped_field_set, position_context):  # type: ignore[override]
        plain = plain_fields(parent_type)
        manager = self.middleware_manager
        if not plain or (manager is not None and manager._middleware_resolvers is not None):
            return super().execute_fields(parent_type, source_value, path, grouped_field_set, position_context)
        results: dict[str, Any] = {}
        awaitable: list[str] = []
        try:
            self._fill(parent_type, source_value, path, grouped_field_set, position_context, plain, results, awaitable)
        except Exception:
            if awaitable:
                self.settle_in_background([results[name] for name in awaitable])
            raise
        if not awaitable:
            return results

        async def gather() -> dict[str, Any]:
            from graphql.pyutils import gather_with_cancel

            done = await gather_with_cancel(*(results[name] for name in awaitable))
            results.update(zip(awaitable, done, strict=True))
            return results

        return gather()

    def _fill(self, parent_type, source_value, path, grouped_field_set, position_context, plain, results,
              awaitable) -> None:
        is_awaitable = self.is_awaitable
        for response_name, details in grouped_field_set.items():
            node = details[0].node
            getter = plain.get(node.name.value)
            value = _NOT_PLAIN
            if getter is not None and not node.arguments and not node.directives and len(details) == 1:
                value = self._direct(parent_type, source_value, path, response_name, details, getter)
            if value is _NOT_PLAIN:
                value = self.execute_field(parent_type, source_value, details, Path(path, response_name,
                                                                                    parent_type.name),
                                           position_context)
                if value is not _UNDEFINED and is_awaitable(value):
                    awaitable.append(response_name)
                elif value is _UNDEFINED:
                    continue
            elif is_awaitable(value):
                awaitable.append(response_name)
            results[response_name] = value

    def _direct(self, parent_type, source, path, response_name, details, getter) -> Any:
        field = parent_type.fields[details[0].node.name.value]
        try:
            value = getter(source)
        except Exception:  # noqa: BLE001 - the ordinary path reports it
            return _NOT_PLAIN
        return_type = field.type
        non_null = is_non_null_type(return_type)
        if non_null:
            if value is None:
                return _NOT_PLAIN
            return_type = return_type.of_type
        elif value is None:
            return None
        if is_leaf_type(return_type):
            try:
                serialized = return_type.serialize(value)
            except Exception:  # noqa: BLE001
                return _NOT_PLAIN
            return _NOT_PLAIN if serialized is None else serialized
        if isinstance(return_type, GraphQLObjectType) and (return_type.is_type_of is None
                                                           or return_type.is_type_of(value, None)):
            grouped, deferred, *_ = self.collect_subfields(return_type, details)
            if deferred:
                return _NOT_PLAIN
            child = Path(path, response_name, parent_type.name)
            if non_null:  # an error below propagates past this field either way
                return self.execute_fields(return_type, value, child, grouped, None)
            # An error below a nullable field must null this field, which the ordinary path does: only
            # plain leaves (no awaiting) are tried here, and on an error the field is done again the
            # ordinary way (an error already recorded at a path is not recorded twice).
            if not self._only_plain_leaves(return_type, grouped):
                return _NOT_PLAIN
            try:
                return self.execute_fields(return_type, value, child, grouped, None)
            except Exception:  # noqa: BLE001
                return _NOT_PLAIN
        return _NOT_PLAIN

    def complete_iterable_value(self, item_type, field_details_list, info, path, items,  # type: ignore[override]
                                position_context):
        """A long list completed in stretches of STRETCH_SECONDS, the event loop free between them: a
        heavy operation's thousand changes (or ten thousand papers) do not hold every other request of
        the process for the hundreds of milliseconds completing them takes in one go; and a deadline
        reached meanwhile cancels it between stretches."""
        if not isinstance(items, (list, tuple)) or len(items) <= LONG_LIST \
                or self.get_stream_usage(field_details_list, path):
            return super().complete_iterable_value(item_type, field_details_list, info, path, items,
                                                   position_context)

        async def in_stretches() -> list[Any]:
            from graphql.pyutils import gather_with_cancel

            completed: list[Any] = []
            awaiting: list[int] = []
            turns = Turns()
            try:
                for index, item in enumerate(items):
                    if turns.due():
                        await turns.take()
                    item_path = path.add_key(index, None)
                    if self.is_awaitable(item):
                        completed.append(self.complete_awaitable_list_item_value(
                            item, item_type, field_details_list, info, item_path, position_context))
                        awaiting.append(index)
                    elif self.complete_list_item_value(item, completed, item_type, field_details_list, info,
                                                       item_path, position_context):
                        awaiting.append(index)
            except BaseException:
                if awaiting:
                    self.settle_in_background([completed[i] for i in awaiting])
                raise
            if awaiting:
                done = await gather_with_cancel(*(completed[i] for i in awaiting))
                for i, value in zip(awaiting, done, strict=True):
                    completed[i] = value
            return completed

        return in_stretches()

    @staticmethod
    def _only_plain_leaves(object_type: GraphQLObjectType, grouped: Any) -> bool:
        plain = plain_fields(object_type)
        for details in grouped.values():
            node = details[0].node
            name = node.name.value
            if name not in plain or node.arguments or node.directives or len(details) != 1:
                return False
            field_type = object_type.fields[name].type
            if not is_leaf_type(field_type.of_type if is_non_null_type(field_type) else field_type):
                return False
        return True



class CompiledExecutionContext(DirectExecutionContext):
    """Answers an operation app.compiled can compile with its one statement; anything else, and a compiled
    operation whose arguments the ordinary path would refuse, executes as DirectExecutionContext does."""

    compiled = True  # read by the request pipeline: a compiled operation is planned as one statement

    def execute_collected_root_fields(self, root_type, root_value, grouped_field_set, serially,  # type: ignore[override]
                                      new_defer_usages):
        from app.compiled import compiled_for, run

        compiled = compiled_for(self.operation, {name: f.definition for name, f in self.fragments.items()})
        if compiled is None:
            return super().execute_collected_root_fields(root_type, root_value, grouped_field_set, serially,
                                                         new_defer_usages)

        async def answer() -> Any:
            try:
                data = await run(compiled, self)
            except Exception as exc:  # noqa: BLE001 - as graphql-core treats a failing nullable root field
                from graphql import located_error

                path = Path(None, compiled.response_key, root_type.name)
                self.collected_errors.add(located_error(exc, [compiled.field], path.as_list()), path)
                return {compiled.response_key: None}
            if data is not None:
                return data
            session = getattr(self.context_value, "session", None)
            if session is not None and session.statements == 0:
                session.single_statement = False  # the ordinary path may need several statements
            result = super(CompiledExecutionContext, self).execute_collected_root_fields(
                root_type, root_value, grouped_field_set, serially, new_defer_usages)
            return await result if self.is_awaitable(result) else result

        return answer()
