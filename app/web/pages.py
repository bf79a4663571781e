"""Server-rendered pages that are not records: GraphiQL."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import HTMLResponse

DEFAULT_QUERY = """# Who cites MegaScale, how well was each reference resolved, and is the cited work in good standing?
query Citations($id: String! = "2402.15627") {
  paper(arxivId: $id) {
    title
    latestVersion
    inbound(first: 5) {
      totalCount
      edges {
        node {
          referenceIndex
          citingPaper { arxivId title }
          resolution { status resolverSource observedAt }
          standingNotice { state reason observation }
        }
      }
      pageInfo { hasNextPage endCursor }
    }
    externalCitationMeasurements { source count observedAt }
    citationRecord { contextDigest thesis }
  }
}
"""

GRAPHIQL = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>GraphiQL · pith-graph</title>
<link rel="stylesheet" href="/static/vendor/graphiql.min.css">
<link rel="stylesheet" href="/static/graphiql-a11y.css">
<link rel="icon" href="/favicon.ico" type="image/svg+xml">
</head>
<body>
<main id="main"><h1 class="visually-hidden">GraphiQL: the pith-graph GraphQL API</h1>
<div id="graphiql">Loading GraphiQL…</div></main>
<script src="/static/vendor/react.production.min.js"></script>
<script src="/static/vendor/react-dom.production.min.js"></script>
<script src="/static/vendor/graphiql.min.js"></script>
<script src="/static/vendor/graphql-ws.min.js"></script>
<script>
  // Queries over HTTP; subscriptions over graphql-transport-ws on the same server, connected when first used.
  const wsUrl = new URL("/graphql", location.href).href.replace(/^http/, "ws");
  const fetcher = GraphiQL.createFetcher({
    url: "/graphql",
    wsClient: graphqlWs.createClient({ url: wsUrl, lazy: true, retryAttempts: 3 }),
  });
  const root = ReactDOM.createRoot(document.getElementById("graphiql"));
  root.render(React.createElement(GraphiQL, {
    fetcher,
    defaultQuery: __DEFAULT_QUERY__,
    defaultEditorToolsVisibility: true,
  }));
  // GraphiQL's editors are CodeMirror textareas without names, and their scrolling areas take no focus:
  // each gets the name of what it edits or shows, and a place in the tab order.
  const names = [[".graphiql-query-editor", "GraphQL query"], [".graphiql-response", "Result"],
                 [".graphiql-editor-tool", "Variables or headers"]];
  function label() {
    for (const [where, name] of names) {
      document.querySelectorAll(where + " textarea:not([aria-label])").forEach((t) => t.setAttribute("aria-label", name));
    }
    document.querySelectorAll(".CodeMirror-scroll:not([tabindex='0'])").forEach((s) => s.setAttribute("tabindex", "0"));
  }
  new MutationObserver(label).observe(document.getElementById("graphiql"), { childList: true, subtree: true });
</script>
</body>
</html>
"""


def graphiql_page(request: Request, query: str | None = None) -> HTMLResponse:
    # json.dumps, then escape "</" so no string can close the script element.
    literal = json.dumps(query or DEFAULT_QUERY).replace("</", "<\\/")
    return HTMLResponse(GRAPHIQL.replace("__DEFAULT_QUERY__", literal),
                        headers={"Cache-Control": "no-cache", "Content-Security-Policy": _CSP})


_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; font-src 'self' data:")
