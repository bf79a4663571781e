// A live citation's edge appended to the inbound connections a screen shows (its cursor as the
// connection lists it), with the connection's new total.
import { graphql } from "relay-runtime";

export const subscription = graphql`
  subscription CitationEdgeAddedSubscription($id: String!, $after: String, $connections: [ID!]!) {
    citationAdded(arxivId: $id, after: $after) {
      cursor previousCursor totalCount
      edge @appendEdge(connections: $connections) {
        cursor node { id observationId resolution { status } citingPaper { arxivId } }
      }
    }
  }
`;
