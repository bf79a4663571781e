// A citationAdded event into a loaded inbound connection ({ edges, pageInfo, totalCount }), in place:
// after the loaded edge named by previousCursor (first when null). An edge whose place is past the
// loaded pages (previousCursor not loaded, or the last loaded edge while more pages follow) comes
// with those pages: only the total changes. An edge already there (a replay) is not added twice.
// pageInfo's start and end cursors follow an edge added at either end (relayStylePagination reads them).
export function spliceCitation(inbound, { edge, previousCursor, totalCount }) {
  const { edges, pageInfo } = inbound;
  const at = previousCursor === null ? 0 : edges.findIndex((e) => e.cursor === previousCursor) + 1;
  const past = (at === 0 && previousCursor !== null) || (at === edges.length && edges.length > 0 && pageInfo?.hasNextPage);
  if (past || edges.some((e) => e.cursor === edge.cursor)) return { ...inbound, totalCount };
  const ends = { ...(at === 0 && { startCursor: edge.cursor }), ...(at === edges.length && { endCursor: edge.cursor }) };
  return { ...inbound, totalCount, edges: [...edges.slice(0, at), edge, ...edges.slice(at)],
           ...(pageInfo && { pageInfo: { ...pageInfo, ...ends } }) };
}
