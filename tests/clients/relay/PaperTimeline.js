import { graphql } from "relay-runtime";

export const query = graphql`
  query PaperTimelineQuery($id: String!, $asOf: DateTime) {
    paper(arxivId: $id, asOf: $asOf) { id ...PaperTimeline_paper }
  }
`;

export const fragment = graphql`
  fragment PaperTimeline_paper on Paper
    @refetchable(queryName: "PaperTimelinePaginationQuery")
    @argumentDefinitions(count: { type: "Int", defaultValue: 5 }, cursor: { type: "String" }) {
    timeline(first: $count, after: $cursor) @connection(key: "PaperTimeline_timeline") {
      edges { node { at contextDigest kinds } }
    }
  }
`;
