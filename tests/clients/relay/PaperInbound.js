// A paper's citing observations as a Relay pagination fragment (usePaginationFragment's shape).
import { graphql } from "relay-runtime";

export const query = graphql`
  query PaperInboundQuery($id: String!, $asOf: DateTime) {
    paper(arxivId: $id, asOf: $asOf) { id ...PaperInbound_paper }
  }
`;

export const fragment = graphql`
  fragment PaperInbound_paper on Paper
    @refetchable(queryName: "PaperInboundPaginationQuery")
    @argumentDefinitions(count: { type: "Int", defaultValue: 4 }, cursor: { type: "String" }) {
    arxivId
    inbound(first: $count, after: $cursor) @connection(key: "PaperInbound_inbound") {
      totalCount
      edges { node { id observationId resolution { status } citingPaper { arxivId } } }
    }
  }
`;
