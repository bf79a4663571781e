// A live citation appended to the inbound connections a screen shows.
import { graphql } from "relay-runtime";

export const subscription = graphql`
  subscription CitationAddedSubscription($id: String!, $connections: [ID!]!) {
    citationAdded(arxivId: $id) {
      cursor
      observation @appendNode(connections: $connections, edgeTypeName: "CitationEdge") {
        id observationId citingPaper { arxivId }
      }
    }
  }
`;
