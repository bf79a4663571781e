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
from typing import Any

ENABLING = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
UNTRACED = "healthz,readyz,metrics,static"  # paths the ASGI middleware does not trace


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


def tracing_middleware(provider: Any) -> Any:
    """Starlette middleware for a server span per request; statements traced (asyncpg instrumented)."""
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor
    from starlette.middleware import Middleware

    instrumentor = AsyncPGInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()  # a new provider (tests build several apps): statements go to it
    instrumentor.instrument(tracer_provider=provider)
    return Middleware(OpenTelemetryMiddleware, tracer_provider=provider, excluded_urls=UNTRACED)


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
