import { graphql } from "relay-runtime";

export const query = graphql`
  query SearchResultsQuery($words: String!, $asOf: DateTime) { ...SearchResults_query @arguments(words: $words, asOf: $asOf) }
`;

export const fragment = graphql`
  fragment SearchResults_query on Query
    @refetchable(queryName: "SearchResultsPaginationQuery")
    @argumentDefinitions(words: { type: "String!" }, asOf: { type: "DateTime" },
                         count: { type: "Int", defaultValue: 4 }, cursor: { type: "String" }) {
    searchPapers(query: $words, first: $count, after: $cursor, asOf: $asOf) @connection(key: "SearchResults_searchPapers") {
      edges { score node { id arxivId } }
    }
  }
`;
