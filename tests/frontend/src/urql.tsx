// The same page with urql: queries over HTTP, citationAdded over graphql-ws, spliced into the page's
// own list (no refetch).
import { StrictMode, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { Client, Provider, cacheExchange, fetchExchange, subscriptionExchange, useQuery, useSubscription } from "urql";
import { createClient } from "graphql-ws";
import { graphql } from "./gql";
import { API, PAPER } from "./config";
import { RESUMING } from "../../clients/recipes/resume.mjs";
import { spliceCitation } from "../../clients/recipes/splice.mjs";

const PAGE = graphql(`
  query UrqlPaperPage($id: String!, $asOf: DateTime, $first: Int) {
    changeCursor
    paper(arxivId: $id, asOf: $asOf) {
      id title
      inbound(first: $first) {
        totalCount
        edges { cursor node { id observationId citingPaper { id arxivId title } citedWork { id retracted } } }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
`);

const ADDED = graphql(`
  subscription UrqlCitationAdded($id: String!, $after: String) {
    citationAdded(arxivId: $id, after: $after) {
      cursor previousCursor totalCount
      edge { cursor node { id observationId citingPaper { id arxivId title } citedWork { id retracted } } }
    }
  }
`);

const ws = createClient({ url: API.replace(/^http/, "ws") + "/graphql", ...RESUMING });
const client = new Client({
  url: API + "/graphql",
  exchanges: [cacheExchange, fetchExchange, subscriptionExchange({
    forwardSubscription: (request) => ({
      subscribe: (sink) => ({ unsubscribe: ws.subscribe({ ...request, query: request.query ?? "" }, sink) }),
    }),
  })],
});

type Inbound = NonNullable<NonNullable<ReturnType<typeof useQuery<typeof PAGE>>[0]["data"]>["paper"]>["inbound"];

function Page() {
  const [first, setFirst] = useState(100);
  const [{ data }] = useQuery({ query: PAGE, variables: { id: PAPER, first } });
  const [inbound, setInbound] = useState<Inbound | null>(null);
  useEffect(() => { if (data?.paper) setInbound(data.paper.inbound); }, [data]);
  useSubscription({ query: ADDED, variables: { id: PAPER, after: data?.changeCursor }, pause: !data }, (_, event) => {
    setInbound((current) => (current ? spliceCitation(current, event.citationAdded) : current));
    return event;
  });
  return (
    <main>
      <h1>{data?.paper?.title ?? "Citations"}</h1>
      <button type="button" onClick={() => setFirst(first === 100 ? 99 : 100)}>Reload</button>
      {inbound && (
        <>
          <p data-testid="total">{inbound.totalCount} citations</p>
          <ol data-testid="citations">
            {inbound.edges.map(({ cursor, node }) => (
              <li key={cursor} data-arxiv={node.citingPaper.arxivId}>{node.citingPaper.arxivId}: {node.citingPaper.title}</li>
            ))}
          </ol>
        </>
      )}
    </main>
  );
}

createRoot(document.getElementById("root")!).render(
  <StrictMode><Provider value={client}><Page /></Provider></StrictMode>,
);
