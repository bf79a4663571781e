# pith-graph: the GraphQL API over the citation graph.
# With DATABASE_URL it serves that PostgreSQL; without it, an embedded server keeps its data in the
# volume /home/pith/.local/share/pith-graph (created here, owned by the pith user, so a named volume
# mounted there is writable).
#
#   docker build -t pith-graph .
#   docker run -p 8000:8000 -v pith-data:/home/pith/.local/share/pith-graph pith-graph
#
# Production defaults: no GraphQL introspection, no field suggestions. For GraphiQL during
# development, run with -e PITH_INTROSPECTION=1 -e PITH_ENV=development.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PITH_HOST=0.0.0.0 \
    PITH_PORT=8000 \
    PITH_ENV=production \
    PITH_INTROSPECTION=0

RUN useradd --create-home --uid 10001 pith \
 && mkdir -p /home/pith/.local/share/pith-graph \
 && chown -R pith:pith /home/pith/.local
WORKDIR /app
COPY pyproject.toml README.md LICENSE ./
COPY app ./app
COPY loaders ./loaders
RUN pip install . && rm -rf /root/.cache

USER pith
VOLUME ["/home/pith/.local/share/pith-graph"]
EXPOSE 8000
# pith-graph handles SIGTERM from its first moment (PID 1 ignores signals it has no handler for).
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PITH_PORT', '8000'), timeout=2)"]
CMD ["pith-graph", "serve"]
