# pith-graph: the GraphQL API over the citation graph.
# With DATABASE_URL it serves that PostgreSQL; without it, an embedded server keeps its data in
# /home/pith/.local/share/pith-graph (mount a volume there to keep it).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PITH_HOST=0.0.0.0 \
    PITH_PORT=8000

RUN useradd --create-home --uid 10001 pith
WORKDIR /app
COPY pyproject.toml README.md ./
COPY app ./app
COPY loaders ./loaders
RUN pip install . && rm -rf /root/.cache

USER pith
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PITH_PORT', '8000'), timeout=2)"]
CMD ["pith-graph", "serve"]
