// Apollo Client: splice live citations into the page's query, with no refetch.
import { parse } from "graphql";
import { spliceCitation } from "./splice.mjs";

export const CITATION_ADDED = parse(`subscription CitationAdded($id: String!, $after: String) {
  citationAdded(arxivId: $id, after: $after) {
    cursor previousCursor totalCount
    edge { cursor node { __typename id observationId citingPaper { __typename id arxivId } } }
  }
}`);  // __typename: Apollo's link adds it to what it sends; written out for a graphql-ws client used alone

// 1. updateQuery: the page's query selects changeCursor, paper { inbound { totalCount edges { cursor node }
//    pageInfo } }; the subscription starts after what the page read, so nothing committed in between is lost.
export function spliceWithUpdateQuery(observable, arxivId) {
  return observable.subscribeToMore({
    document: CITATION_ADDED,
    variables: { id: arxivId, after: observable.getCurrentResult().data.changeCursor },
    updateQuery: (previous, { subscriptionData }) => {
      const event = subscriptionData.data?.citationAdded;
      if (!event || !previous.paper) return previous;
      return { ...previous, paper: { ...previous.paper, inbound: spliceCitation(previous.paper.inbound, event) } };
    },
  });
}

// 2. cache.modify: the edge goes into every cached page of the paper's unfiltered inbound connection
//    (the field as relayStylePagination stores it), whatever query shows it.
const NODE = parse(`fragment SplicedCitation on CitationObservation { id observationId citingPaper { id arxivId } }`);

export function spliceIntoCache(cache, paperId, event) {
  const node = cache.writeFragment({ fragment: NODE, data: event.edge.node });
  const edge = { __typename: "CitationEdge", cursor: event.edge.cursor, node };
  cache.modify({
    id: paperId,  // cache.identify(paper)
    fields: {
      inbound(existing, { storeFieldName }) {
        // With relayStylePagination(["status"]) the unfiltered list is stored as inbound:{}; a list
        // filtered by status is another field (the event may not belong in it).
        if (!existing || storeFieldName.includes('"status"')) return existing;
        return spliceCitation(existing, { ...event, edge });
      },
    },
  });
}
