// The paper page with Apollo Client 4, as the README's frontend section builds it: paged citations,
// an as-of picker, retraction badges, and live citations spliced into the loaded pages (no refetch),
// resuming after a server restart.
import { StrictMode, useEffect, useState } from "react";
import { createRoot } from "react-dom/client";
import { ApolloClient, ApolloLink, HttpLink, InMemoryCache } from "@apollo/client";
import { ApolloProvider, useQuery } from "@apollo/client/react";
import { GraphQLWsLink } from "@apollo/client/link/subscriptions";
import { getMainDefinition, relayStylePagination } from "@apollo/client/utilities";
import { createClient } from "graphql-ws";
import { graphql } from "./gql";
import { API, PAPER } from "./config";
import { RESUMING } from "../../clients/recipes/resume.mjs";
import { spliceCitation } from "../../clients/recipes/splice.mjs";

const PAPER_PAGE = graphql(`
  query PaperPage($id: String!, $asOf: DateTime, $first: Int, $after: String) {
    changeCursor
    paper(arxivId: $id, asOf: $asOf) {
      id title
      inbound(first: $first, after: $after) {
        totalCount
        edges { cursor node { id observationId citingPaper { id arxivId title } citedWork { id retracted } } }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
`);

const CITATION_ADDED = graphql(`
  subscription PaperCitationAdded($id: String!, $after: String) {
    citationAdded(arxivId: $id, after: $after) {
      cursor previousCursor totalCount
      edge { cursor node { id observationId citingPaper { id arxivId title } citedWork { id retracted } } }
    }
  }
`);

const ws = createClient({ url: API.replace(/^http/, "ws") + "/graphql", ...RESUMING });
const link = ApolloLink.split(
  ({ query }) => {
    const definition = getMainDefinition(query);
    return definition.kind === "OperationDefinition" && definition.operation === "subscription";
  },
  new GraphQLWsLink(ws),
  // credentials: "include", as many apps set it: the server allows it for the origins it names
  new HttpLink({ uri: API + "/graphql", credentials: "include" }),
);
const client = new ApolloClient({
  link,
  cache: new InMemoryCache({ typePolicies: { Paper: { fields: { inbound: relayStylePagination(["status"]) } } } }),
});

function Page() {
  const [asOf, setAsOf] = useState<string | undefined>(undefined);
  const { data, loading, error, fetchMore, refetch, subscribeToMore } = useQuery(PAPER_PAGE, {
    variables: { id: PAPER, asOf, first: 3 },
  });
  const live = asOf === undefined && data?.changeCursor !== undefined;
  useEffect(() => {
    if (!live) return;
    // After what this page read: nothing committed in between is lost, and a retry resumes there.
    return subscribeToMore({
      document: CITATION_ADDED,
      variables: { id: PAPER, after: data!.changeCursor },
      updateQuery: (previous, { subscriptionData }) => {
        const event = subscriptionData.data?.citationAdded;
        if (!event || !previous.paper?.inbound) return previous;
        return { ...previous, paper: { ...previous.paper, inbound: spliceCitation(previous.paper.inbound, event) } };
      },
    });
  }, [live, subscribeToMore]);  // eslint-disable-line react-hooks/exhaustive-deps
  const inbound = data?.paper?.inbound;
  return (
    <main>
      <h1>{data?.paper?.title ?? "Citations"}</h1>
      <form onSubmit={(e) => e.preventDefault()}>
        <label>As of <input type="date" name="asOf" value={asOf ?? ""}
          onChange={(e) => setAsOf(e.target.value || undefined)} /></label>
        <button type="button" onClick={() => setAsOf(undefined)}>Now</button>
        <button type="button" onClick={() => refetch()}>Refresh</button>
      </form>
      {error && <p role="alert">{error.message}</p>}
      {loading && !data && <p>Loading…</p>}
      {inbound && (
        <>
          <p data-testid="total">{inbound.totalCount} citations{asOf ? ` as of ${asOf}` : ""}</p>
          <ol data-testid="citations">
            {inbound.edges.map(({ cursor, node }) => (
              <li key={cursor} data-arxiv={node.citingPaper.arxivId}>
                {node.citingPaper.arxivId}: {node.citingPaper.title}
                {node.citedWork.retracted && <strong className="badge"> cites a retracted work</strong>}
              </li>
            ))}
          </ol>
          {inbound.pageInfo.hasNextPage && (
            <button type="button" onClick={() => fetchMore({ variables: { after: inbound.pageInfo.endCursor } })}>
              More
            </button>
          )}
        </>
      )}
    </main>
  );
}

createRoot(document.getElementById("root")!).render(
  <StrictMode><ApolloProvider client={client}><Page /></ApolloProvider></StrictMode>,
);
