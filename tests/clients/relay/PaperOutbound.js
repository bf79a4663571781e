import { graphql } from "relay-runtime";

export const query = graphql`
  query PaperOutboundQuery($id: String!, $asOf: DateTime) {
    paper(arxivId: $id, asOf: $asOf) { id ...PaperOutbound_paper }
  }
`;

export const fragment = graphql`
  fragment PaperOutbound_paper on Paper
    @refetchable(queryName: "PaperOutboundPaginationQuery")
    @argumentDefinitions(count: { type: "Int", defaultValue: 4 }, cursor: { type: "String" }) {
    outbound(first: $count, after: $cursor) @connection(key: "PaperOutbound_outbound") {
      totalCount
      edges { node { id referenceIndex citedPaper { arxivId } } }
    }
  }
`;
