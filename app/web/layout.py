"""The page frame shared by every HTML page: one stylesheet, no script, no external resource."""

from __future__ import annotations

from html import escape

# Bumped when the markup changes, so page ETags change with it.
TEMPLATE_VERSION = "4"


def time_tag(text: str) -> str:
    return f'<time datetime="{escape(text)}">{escape(text)}</time>'


def page(title: str, body: str, *, status_note: str = "") -> str:
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>{escape(title)}</title>
<link rel="stylesheet" href="/static/site.css">
<link rel="icon" href="/favicon.ico" type="image/svg+xml">
</head>
<body>
<header class="site"><a class="brand" href="/">pith-graph</a>
<nav aria-label="Site"><a href="/">Search</a> <a href="/graphql">GraphQL</a> <a href="/evidence">Evidence</a></nav></header>
<main>
{status_note}{body}
</main>
<footer class="site"><p>Citation records as of an instant, with provenance on every edge.
<a href="/graphql">GraphQL API</a></p></footer>
</body>
</html>
"""
