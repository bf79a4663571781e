"""OpenTelemetry traces, with the `[otel]` extra (`pip install -e '.[otel]'`).

A trace per request: the HTTP server span (OpenTelemetry's ASGI middleware: a W3C `traceparent`
from the client makes it a child of the client's span, so the trace continues), under it the GraphQL
operation with its parse, validate and execute spans (Strawberry's OpenTelemetry extension, without
its span per field), and a span per SQL statement (OpenTelemetry's asyncpg instrumentation) under
what ran it.

Configured by the standard variables: on when OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT or
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (and OTEL_SDK_DISABLED is not true); OTEL_TRACES_EXPORTER
is `otlp` (OTLP over HTTP, OTEL_EXPORTER_OTLP_* say where), `console` or both; OTEL_SERVICE_NAME
(default pith-graph) and OTEL_RESOURCE_ATTRIBUTES name the service.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

ENABLING = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
# Paths the ASGI middleware does not trace (regular expressions searched in the URL, as
# OTEL_PYTHON_ASGI_EXCLUDED_URLS takes them; that variable's own entries are added).
UNTRACED = r"/healthz$,/readyz$,/metrics$,/static/"
REQUEST_ID_ATTRIBUTE = "pith.request_id"  # on every span of a request: the id its log lines carry


def provider_from_env(env: dict[str, str] | None = None) -> Any | None:
    """A TracerProvider as the OTEL_* variables describe it; None when they ask for no traces."""
    env = dict(os.environ if env is None else env)
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true" or not any(env.get(k) for k in ENABLING):
        return None
    exporters = [e.strip() for e in env.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if e.strip()]
    if exporters == ["none"]:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError as exc:
        raise ValueError("OTEL_* asks for traces, but the [otel] extra is not installed "
                         "(pip install 'pith-graph[otel]')") from exc
    provider = TracerProvider(resource=Resource.create(
        {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "pith-graph"}))
    for name in exporters:
        if name == "otlp":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        else:
            raise ValueError(f"OTEL_TRACES_EXPORTER: {name!r} is not one of otlp, console, none")
    return provider


def excluded_urls(env: Mapping[str, str] | None = None) -> Any:
    """What the ASGI middleware leaves untraced, as the ExcludeList it takes (every release of the
    [otel] extra's range takes that; only recent ones also parse a string themselves)."""
    from opentelemetry.util.http import parse_excluded_urls

    given: Mapping[str, str] = os.environ if env is None else env
    extra = given.get("OTEL_PYTHON_ASGI_EXCLUDED_URLS") or given.get("OTEL_PYTHON_EXCLUDED_URLS") or ""
    return parse_excluded_urls(",".join(part for part in (UNTRACED, extra) if part))


def label_spans(provider: Any) -> None:
    """Every span started inside a request carries the request's id (the server span gets it as the
    request id is chosen, app.middleware.RequestLayer)."""
    if getattr(provider, "_pith_labelled", False) or not hasattr(provider, "add_span_processor"):
        return
    from opentelemetry.sdk.trace import SpanProcessor

    from app.logs import request_id

    class RequestIdSpans(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            rid = request_id.get()
            if rid != "-":
                span.set_attribute(REQUEST_ID_ATTRIBUTE, rid)

    provider.add_span_processor(RequestIdSpans())
    provider._pith_labelled = True


def current_span_ids(rid: str) -> dict[str, str]:
    """The trace and span ids of the request's server span (for its log lines), which gets `rid`."""
    from opentelemetry import trace

    span = trace.get_current_span()
    context = span.get_span_context()
    if not context.is_valid:
        return {}
    span.set_attribute(REQUEST_ID_ATTRIBUTE, rid)
    return {"trace_id": format(context.trace_id, "032x"), "span_id": format(context.span_id, "016x")}


def tracing_middleware(provider: Any) -> Any:
    """Starlette middleware for a server span per request; statements traced (asyncpg instrumented)."""
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
    from starlette.middleware import Middleware

    instrumentor = AsyncPGInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()  # a new provider (tests build several apps): statements go to it
    instrumentor.instrument(tracer_provider=provider)
    label_spans(provider)
    return Middleware(OpenTelemetryMiddleware, tracer_provider=provider, excluded_urls=excluded_urls())


def graphql_spans(provider: Any) -> Any:
    """The schema extension for the operation's spans: parse, validate, execute."""
    from opentelemetry import trace
    from strawberry.extensions import SchemaExtension
    from strawberry.extensions.tracing.opentelemetry import OpenTelemetryExtension
    from strawberry.types.execution import ExecutionContext

    class GraphQLSpans(OpenTelemetryExtension):
        # A span per resolved field costs more than it tells (a page is thousands of fields); the
        # statements' spans show where the time goes.
        resolve = SchemaExtension.resolve

        def __init__(self, *, execution_context: ExecutionContext | None = None) -> None:
            super().__init__(execution_context=execution_context, tracer_provider=provider)

        def on_execute(self):  # type: ignore[override]
            from strawberry.extensions.tracing.opentelemetry import LifecycleStep

            parent = trace.set_span_in_context(self._span_holder[LifecycleStep.OPERATION])
            with self._tracer.start_as_current_span("GraphQL Execution", context=parent):
                yield

    return GraphQLSpans
